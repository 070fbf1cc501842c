#include "disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "flashrtc/error.hpp"
#include "hashing.hpp"
#include "log.hpp"

namespace flashrtc::detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kCubinFile = "kernel.cubin";
constexpr const char* kPtxFile = "kernel.ptx";
constexpr const char* kLogFile = "compile.log";
constexpr const char* kMetaFile = "meta.json";

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return content.str();
}

void write_file(const fs::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) throw Error(ErrorCode::kCacheIo, "cannot write " + path.string() + ": " + std::strerror(errno));
}

json resources_to_json(const ResourceReport& r) {
  return {{"registers", r.registers},
          {"spill_store_bytes", r.spill_store_bytes},
          {"spill_load_bytes", r.spill_load_bytes},
          {"stack_frame_bytes", r.stack_frame_bytes},
          {"static_smem_bytes", r.static_smem_bytes},
          {"barriers", r.barriers}};
}

ResourceReport resources_from_json(const json& j) {
  ResourceReport r;
  r.registers = j.at("registers").get<int>();
  r.spill_store_bytes = j.at("spill_store_bytes").get<int>();
  r.spill_load_bytes = j.at("spill_load_bytes").get<int>();
  r.stack_frame_bytes = j.at("stack_frame_bytes").get<int>();
  r.static_smem_bytes = j.at("static_smem_bytes").get<int>();
  r.barriers = j.at("barriers").get<int>();
  return r;
}

std::string unique_suffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<std::uint64_t>(::getpid()));
  std::ostringstream s;
  s << ::getpid() << "-" << std::hex << rng();
  return s.str();
}

}  // namespace

fs::path disk_cache_root(const fs::path& cache_dir) { return cache_dir / ("v" + std::to_string(kCacheFormatVersion)); }

DiskCache::DiskCache(fs::path root) : root_(std::move(root)) {}

fs::path DiskCache::entry_dir(const KeyInputs& inputs) const { return root_ / inputs.arch / inputs.key(); }

std::optional<KernelArtifact> DiskCache::load(const KeyInputs& inputs) const {
  const fs::path dir = entry_dir(inputs);
  std::error_code error;
  if (!fs::exists(dir / kMetaFile, error)) return std::nullopt;
  const std::string key = inputs.key();
  auto reject = [&](const std::string& why) -> std::optional<KernelArtifact> {
    log().warn("cache entry {} is unusable ({}): recompiling", dir.string(), why);
    return std::nullopt;
  };
  const auto meta_text = read_file(dir / kMetaFile);
  if (!meta_text) return reject("meta.json unreadable");
  json meta;
  try {
    meta = json::parse(*meta_text);
  } catch (const json::exception& e) {
    return reject(std::string("meta.json does not parse: ") + e.what());
  }
  try {
    if (meta.at("key").get<std::string>() != key || meta.at("inputs") != inputs.to_json())
      return reject("meta.json describes another kernel");
    const auto cubin = read_file(dir / kCubinFile);
    if (!cubin) return reject("kernel.cubin missing");
    if (cubin->size() != meta.at("cubin_bytes").get<std::size_t>() ||
        digest_hex(*cubin) != meta.at("cubin_digest").get<std::string>())
      return reject("kernel.cubin truncated or altered");
    KernelArtifact artifact;
    artifact.key = key;
    artifact.inputs = inputs;
    artifact.lowered_name = meta.at("lowered_name").get<std::string>();
    artifact.cubin = *cubin;
    artifact.ptx = read_file(dir / kPtxFile).value_or("");
    artifact.log = read_file(dir / kLogFile).value_or("");
    artifact.resources = resources_from_json(meta.at("resources"));
    artifact.compile_ms = meta.at("compile_ms").get<double>();
    artifact.description = meta.value("kernel", json::object());
    artifact.source = CacheSource::kDisk;
    artifact.entry_dir = dir;
    touch_entry(dir);
    return artifact;
  } catch (const json::exception& e) {
    return reject(std::string("meta.json incomplete: ") + e.what());
  }
}

fs::path DiskCache::store(const KernelArtifact& artifact) const {
  const fs::path final_dir = entry_dir(artifact.inputs);
  const fs::path arch_dir = final_dir.parent_path();
  std::error_code error;
  fs::create_directories(arch_dir, error);
  if (error) throw Error(ErrorCode::kCacheIo, "cannot create " + arch_dir.string() + ": " + error.message());
  // Dot-prefixed temporaries are never read as entries; a crash leaves one behind, harmlessly.
  const fs::path tmp = arch_dir / (".tmp-" + artifact.key + "-" + unique_suffix());
  fs::create_directory(tmp, error);
  if (error) throw Error(ErrorCode::kCacheIo, "cannot create " + tmp.string() + ": " + error.message());
  try {
    write_file(tmp / kCubinFile, artifact.cubin);
    write_file(tmp / kPtxFile, artifact.ptx);
    write_file(tmp / kLogFile, artifact.log);
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    const json meta = {{"format_version", kCacheFormatVersion},
                       {"key", artifact.key},
                       {"inputs", artifact.inputs.to_json()},
                       {"lowered_name", artifact.lowered_name},
                       {"kernel", artifact.description},
                       {"resources", resources_to_json(artifact.resources)},
                       {"compile_ms", artifact.compile_ms},
                       {"cubin_bytes", artifact.cubin.size()},
                       {"cubin_digest", digest_hex(artifact.cubin)},
                       {"ptx_bytes", artifact.ptx.size()},
                       {"created_unix", now}};
    write_file(tmp / kMetaFile, meta.dump(2) + "\n");
    if (fs::exists(final_dir, error)) fs::remove_all(final_dir, error);  // invalid, or we would not be here
    fs::rename(tmp, final_dir, error);
    if (error) throw Error(ErrorCode::kCacheIo, "cannot rename " + tmp.string() + " to " + final_dir.string() + ": " + error.message());
  } catch (...) {
    fs::remove_all(tmp, error);
    throw;
  }
  return final_dir;
}

DiskCache::KeyLock::KeyLock(const DiskCache& cache, const KeyInputs& inputs)
    : lock_(entry_lock_path(cache.entry_dir(inputs))) {}

fs::path entry_lock_path(const fs::path& entry_dir) { return entry_dir.string() + ".lock"; }

void touch_entry(const fs::path& entry_dir) {
  // utimensat with null times sets "now" and needs only write permission, not ownership.
  if (::utimensat(AT_FDCWD, (entry_dir / kMetaFile).c_str(), nullptr, 0) != 0)
    log().debug("cannot mark {} as used: {}", entry_dir.string(), std::strerror(errno));
}

}  // namespace flashrtc::detail

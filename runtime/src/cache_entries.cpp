#include "flashrtc/cache_entries.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cache_scan.hpp"
#include "flashrtc/error.hpp"
#include "hashing.hpp"
#include "kernel_artifact.hpp"

namespace flashrtc {

namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {

namespace {

// File names of an entry (DiskCache writes them).
constexpr const char* kCubinFile = "kernel.cubin";
constexpr const char* kPtxFile = "kernel.ptx";
constexpr const char* kLogFile = "compile.log";
constexpr const char* kMetaFile = "meta.json";

std::optional<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return text.str();
}

std::vector<fs::path> arch_children(const fs::path& root, bool temporaries) {
  std::vector<fs::path> found;
  std::error_code error;
  for (fs::directory_iterator arch(root, error), end; !error && arch != end; arch.increment(error)) {
    if (!arch->is_directory(error)) continue;
    std::error_code inner;
    for (fs::directory_iterator entry(arch->path(), inner); !inner && entry != end; entry.increment(inner)) {
      const std::string name = entry->path().filename().string();
      if (entry->is_directory(inner) && (name[0] == '.') == temporaries) found.push_back(entry->path());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

KeyInputs inputs_from(const json& j) {
  KeyInputs inputs;
  inputs.format_version = j.at("format_version").get<int>();
  inputs.source_hash = j.at("source_hash").get<std::string>();
  inputs.name_expression = j.at("name_expression").get<std::string>();
  inputs.options = j.at("options").get<std::string>();
  inputs.arch = j.at("arch").get<std::string>();
  inputs.nvrtc_version = j.at("nvrtc_version").get<std::string>();
  return inputs;
}

}  // namespace

std::vector<fs::path> cache_entry_dirs(const fs::path& root) { return arch_children(root, false); }

std::vector<fs::path> cache_temporaries(const fs::path& root) { return arch_children(root, true); }

std::uint64_t directory_bytes(const fs::path& dir) {
  std::uint64_t bytes = 0;
  std::error_code error;
  for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end; it.increment(error))
    if (it->is_regular_file(error)) bytes += it->file_size(error);
  return bytes;
}

std::int64_t modified_unix(const fs::path& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? static_cast<std::int64_t>(info.st_mtim.tv_sec) : 0;
}

CacheEntry read_cache_entry(const fs::path& dir) {
  CacheEntry e;
  e.dir = dir;
  e.key = dir.filename().string();
  e.arch = dir.parent_path().filename().string();
  e.cubin_path = dir / kCubinFile;
  e.ptx_path = dir / kPtxFile;
  e.log_path = dir / kLogFile;
  e.size_bytes = directory_bytes(dir);
  e.last_used_unix = modified_unix(dir / kMetaFile);
  const auto text = read_text(dir / kMetaFile);
  if (!text) {
    e.problem = "meta.json missing or unreadable";
    return e;
  }
  e.meta_json = *text;
  try {
    const json meta = json::parse(*text);
    const json& inputs = meta.at("inputs");
    e.name_expression = inputs.value("name_expression", "");
    e.lowered_name = meta.value("lowered_name", "");
    e.compile_ms = meta.value("compile_ms", 0.0);
    e.created_unix = meta.value("created_unix", std::int64_t{0});
    const json& r = meta.at("resources");
    e.resources.registers = r.at("registers").get<int>();
    e.resources.spill_store_bytes = r.at("spill_store_bytes").get<int>();
    e.resources.spill_load_bytes = r.at("spill_load_bytes").get<int>();
    e.resources.stack_frame_bytes = r.at("stack_frame_bytes").get<int>();
    e.resources.static_smem_bytes = r.value("static_smem_bytes", 0);
    e.resources.barriers = r.value("barriers", 0);
    // What the kernel layer described (forward_kernel.cpp); another family may record other fields.
    const json kernel = meta.value("kernel", json::object());
    e.kernel = kernel.value("family", "");
    e.dtype = kernel.value("dtype", "");
    e.mask = kernel.value("mask", "");
    e.head_dim = kernel.value("head_dim", 0);
    e.tile = {kernel.value("block_m", 0), kernel.value("block_n", 0), kernel.value("warps", 0),
              kernel.value("stages", 0)};
    e.smem_bytes = kernel.value("smem_bytes", std::size_t{0});
  } catch (const json::exception& error) {
    e.problem = std::string("meta.json does not parse or lacks a field: ") + error.what();
  }
  return e;
}

std::string cache_entry_problem(const fs::path& dir) {
  const auto text = read_text(dir / kMetaFile);
  if (!text) return "meta.json missing or unreadable";
  try {
    const json meta = json::parse(*text);
    const std::string key = meta.at("key").get<std::string>();
    if (key != dir.filename().string()) return "meta.json names key " + key + ", not its directory's";
    const KeyInputs inputs = inputs_from(meta.at("inputs"));
    if (inputs.format_version != kCacheFormatVersion) return "format version " + std::to_string(inputs.format_version);
    if (inputs.key() != key) return "the key is not the digest of the recorded inputs";
    if (inputs.arch != dir.parent_path().filename().string()) return "built for " + inputs.arch + ", filed under another arch";
    const auto cubin = read_text(dir / kCubinFile);
    if (!cubin) return "kernel.cubin missing";
    if (cubin->size() != meta.at("cubin_bytes").get<std::size_t>()) return "kernel.cubin has the wrong size (truncated?)";
    if (digest_hex(*cubin) != meta.at("cubin_digest").get<std::string>()) return "kernel.cubin does not match its digest";
    if (meta.at("lowered_name").get<std::string>().empty()) return "no lowered name";
    meta.at("resources").at("registers").get<int>();
    meta.at("compile_ms").get<double>();
  } catch (const json::exception& error) {
    return std::string("meta.json does not parse or lacks a field: ") + error.what();
  }
  return {};
}

}  // namespace detail

std::vector<CacheEntry> list_cache_entries() {
  std::vector<CacheEntry> entries;
  for (const fs::path& dir : detail::cache_entry_dirs(cache_root())) entries.push_back(detail::read_cache_entry(dir));
  return entries;
}

CacheEntry find_cache_entry(std::string_view key_prefix) {
  if (key_prefix.empty()) throw Error(ErrorCode::kInvalidArgument, "key: empty; give a key or a unique prefix of one");
  std::vector<fs::path> matches;
  for (const fs::path& dir : detail::cache_entry_dirs(cache_root()))
    if (dir.filename().string().rfind(key_prefix, 0) == 0) matches.push_back(dir);
  if (matches.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "key=" + std::string(key_prefix) + ": no cache entry has this key or prefix in " + cache_root().string());
  if (matches.size() > 1) {
    std::string names;
    for (std::size_t i = 0; i < matches.size() && i < 8; ++i)
      names += (i ? ", " : "") + matches[i].parent_path().filename().string() + "/" + matches[i].filename().string();
    throw Error(ErrorCode::kInvalidArgument, "key=" + std::string(key_prefix) + ": matches " +
                                                 std::to_string(matches.size()) + " entries (" + names +
                                                 (matches.size() > 8 ? ", ..." : "") + "); give more characters");
  }
  return detail::read_cache_entry(matches.front());
}

}  // namespace flashrtc

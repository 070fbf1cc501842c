#include "cache/cache_entry_layout.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "flashrtc/error.hpp"
#include "support/atomic_file.hpp"
#include "support/beneath.hpp"
#include "support/bounded_read.hpp"
#include "support/hashing.hpp"
#include "support/json_checked.hpp"

namespace flashrtc::detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Sane bounds for what ptxas reports and NVRTC takes: anything beyond is an edited or damaged file.
constexpr std::int64_t kMaxRegisters = 65536;
constexpr double kMaxCompileMs = 1e9;  // eleven days
constexpr std::size_t kMaxFieldText = 4096;

json resources_to_json(const ResourceReport& r) {
  return {{"registers", r.registers},
          {"spill_store_bytes", r.spill_store_bytes},
          {"spill_load_bytes", r.spill_load_bytes},
          {"stack_frame_bytes", r.stack_frame_bytes},
          {"static_smem_bytes", r.static_smem_bytes},
          {"barriers", r.barriers},
          {"wgmma_serialized", r.wgmma_serialized},
          {"wgmma_serialized_reason", r.wgmma_serialized_reason}};
}

ResourceReport resources_from_json(const json& j) {
  ResourceReport r;
  r.registers = static_cast<int>(json_integer(j, "registers", 0, kMaxRegisters));
  r.spill_store_bytes = json_int(j, "spill_store_bytes");
  r.spill_load_bytes = json_int(j, "spill_load_bytes");
  r.stack_frame_bytes = json_int(j, "stack_frame_bytes");
  r.static_smem_bytes = json_int(j, "static_smem_bytes");
  r.barriers = json_int(j, "barriers");
  r.wgmma_serialized = json_bool(j, "wgmma_serialized");
  r.wgmma_serialized_reason = json_string(j, "wgmma_serialized_reason");
  if (r.wgmma_serialized_reason.size() > kMaxFieldText)
    throw std::invalid_argument("wgmma_serialized_reason is longer than " + std::to_string(kMaxFieldText));
  if (j != resources_to_json(r)) throw std::invalid_argument("resources hold fields ptxas does not report");
  return r;
}

KeyInputs inputs_from_json(const json& j) {
  KeyInputs inputs;
  inputs.format_version = json_int(j, "format_version");
  inputs.source_hash = json_string(j, "source_hash");
  inputs.name_expression = json_string(j, "name_expression");
  inputs.options = json_string(j, "options");
  inputs.arch = json_string(j, "arch");
  inputs.nvrtc_version = json_string(j, "nvrtc_version");
  inputs.nvrtc_build = json_string(j, "nvrtc_build");
  if (j != inputs.to_json()) throw std::invalid_argument("inputs hold fields that are no part of a key");
  return inputs;
}

// The kernel layer's description (dtype, tile, ...): flat, of strings, booleans and integers from 0 to
// 2^31 - 1, so that every reader can show it without a schema of its own.
void check_description(const json& description) {
  if (!description.is_object()) throw std::invalid_argument("kernel is not an object");
  for (const auto& [name, value] : description.items()) {
    if (value.is_string() && value.get_ref<const std::string&>().size() <= kMaxFieldText) continue;
    if (value.is_boolean()) continue;
    if (value.is_number_integer()) {
      json_int(description, name.c_str());
      continue;
    }
    throw std::invalid_argument("kernel." + printable_ascii(name) + "=" + printable_ascii(value.dump()) +
                                ": must be a string, a boolean or an integer from 0 to 2147483647");
  }
}

json normalized_description(const KernelArtifact& artifact) {
  return artifact.description.is_null() ? json::object() : artifact.description;
}

// One digest over everything the entry is: a changed byte of any file or of any meta.json field it serves
// (lowered name, kernel fields, resources, compile time, inputs) makes the entry bad.
std::string entry_digest(const KernelArtifact& artifact) {
  Digest digest;
  digest.add(std::to_string(kCacheFormatVersion));
  digest.add(artifact.key);
  digest.add(artifact.inputs.to_json().dump());
  digest.add(artifact.lowered_name);
  digest.add(normalized_description(artifact).dump());
  digest.add(resources_to_json(artifact.resources).dump());
  digest.add(json(artifact.compile_ms).dump());
  digest.add(artifact.cubin);
  digest.add(artifact.ptx);
  digest.add(artifact.log);
  return digest.hex();
}

std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct EntryFile {
  const char* name;
  const char* size_field;
  std::string KernelArtifact::*content;
};
constexpr EntryFile kEntryFiles[] = {{kCubinFile, "cubin_bytes", &KernelArtifact::cubin},
                                     {kPtxFile, "ptx_bytes", &KernelArtifact::ptx},
                                     {kLogFile, "log_bytes", &KernelArtifact::log}};

}  // namespace

EntryPath split_entry_path(const fs::path& entry_dir) {
  const fs::path arch_dir = entry_dir.parent_path(), root = arch_dir.parent_path();
  return {root.parent_path(), root.filename() / arch_dir.filename() / entry_dir.filename()};
}

EntryRead read_entry(const fs::path& dir) {
  EntryRead read;
  const std::string key = dir.filename().string();
  const std::string arch = dir.parent_path().filename().string();
  auto bad = [&](const std::string& why) {
    read.problem = printable_ascii(why);
    read.artifact.reset();
    return std::move(read);
  };
  const EntryPath where = split_entry_path(dir);
  OpenedDir opened = open_directory_beneath(where.cache_dir, where.below, false);
  if (!opened.ok()) {
    read.absent = opened.missing;
    return bad(opened.problem);
  }
  BoundedRead meta_file = read_file_bounded_at(opened.fd.get(), kMetaFile, kMaxMetaBytes);
  read.absent = meta_file.missing;
  if (!meta_file.ok()) return bad(std::string(kMetaFile) + " " + meta_file.problem);
  json meta;
  try {
    meta = parse_json_bounded(meta_file.content);
  } catch (const json::exception& e) {
    read.meta_text = std::move(meta_file.content);
    return bad(std::string("meta.json does not parse: ") + e.what());
  } catch (const std::exception& e) {
    return bad(std::string("meta.json ") + e.what());
  }
  read.meta_text = std::move(meta_file.content);

  KernelArtifact artifact;
  std::string recorded_digest;
  std::uint64_t sizes[3] = {};
  try {
    if (!meta.is_object()) return bad("meta.json is not an object");
    const int version = json_int(meta, "format_version");
    if (version != kCacheFormatVersion) return bad("format version " + std::to_string(version));
    artifact.key = json_string(meta, "key");
    if (artifact.key != key) return bad("meta.json names key " + artifact.key + ", not its directory's");
    artifact.inputs = inputs_from_json(meta.at("inputs"));
    if (artifact.inputs.format_version != kCacheFormatVersion)
      return bad("inputs of format version " + std::to_string(artifact.inputs.format_version));
    if (artifact.inputs.key() != key) return bad("the key is not the digest of the recorded inputs");
    if (artifact.inputs.arch != arch)
      return bad("built for " + artifact.inputs.arch + ", filed under another arch");
    artifact.lowered_name = json_string(meta, "lowered_name");
    if (artifact.lowered_name.empty()) return bad("no lowered name");
    artifact.description = meta.at("kernel");
    check_description(artifact.description);
    artifact.resources = resources_from_json(meta.at("resources"));
    artifact.compile_ms = json_number(meta, "compile_ms", 0, kMaxCompileMs);
    read.created_unix = json_integer(meta, "created_unix", 0, std::numeric_limits<std::int64_t>::max());
    for (std::size_t i = 0; i < std::size(kEntryFiles); ++i)
      sizes[i] = static_cast<std::uint64_t>(
          json_integer(meta, kEntryFiles[i].size_field, 0, static_cast<std::int64_t>(kMaxEntryFileBytes)));
    recorded_digest = json_string(meta, "entry_digest");
  } catch (const std::exception& e) {
    return bad(std::string("meta.json does not parse or lacks a field: ") + e.what());
  }
  for (std::size_t i = 0; i < std::size(kEntryFiles); ++i) {
    const EntryFile& file = kEntryFiles[i];
    BoundedRead content = read_file_bounded_at(opened.fd.get(), file.name, kMaxEntryFileBytes, sizes[i]);
    if (!content.ok()) return bad(std::string(file.name) + " " + content.problem);
    // It may have changed since fstat: the size read is the one that counts.
    if (content.content.size() != sizes[i])
      return bad(std::string(file.name) + " has the wrong size (truncated?)");
    artifact.*file.content = std::move(content.content);
  }
  if (artifact.cubin.empty()) return bad("kernel.cubin is empty");
  if (entry_digest(artifact) != recorded_digest)
    return bad("the entry digest does not match: a file or a meta.json field was altered");
  artifact.source = CacheSource::kDisk;
  artifact.entry_dir = dir;
  read.artifact = std::move(artifact);
  return read;
}

void write_entry(const fs::path& dir, const KernelArtifact& artifact) {
  const EntryPath where = split_entry_path(dir);
  const fs::path arch_dir = dir.parent_path();
  OpenedDir arch = open_directory_beneath(where.cache_dir, where.below.parent_path(), true);
  if (!arch.ok()) throw Error(ErrorCode::kCacheIo, "cannot store " + dir.string() + ": " + arch.problem);
  // Dot-prefixed temporaries are never read as entries; a crash leaves one behind, harmlessly.
  const std::string tmp_name = ".tmp-" + artifact.key + "-" + unique_temp_suffix();
  const fs::path tmp = arch_dir / tmp_name;
  if (::mkdirat(arch.fd.get(), tmp_name.c_str(), 0755) != 0)
    throw Error(ErrorCode::kCacheIo, "cannot create directory " + tmp.string() + ": " + std::strerror(errno));
  try {
    json meta = {{"format_version", kCacheFormatVersion},
                 {"key", artifact.key},
                 {"inputs", artifact.inputs.to_json()},
                 {"lowered_name", artifact.lowered_name},
                 {"kernel", normalized_description(artifact)},
                 {"resources", resources_to_json(artifact.resources)},
                 {"compile_ms", artifact.compile_ms},
                 {"entry_digest", entry_digest(artifact)},
                 {"created_unix", now_unix()}};
    for (const EntryFile& file : kEntryFiles) {
      write_whole_file(tmp / file.name, artifact.*file.content);
      meta[file.size_field] = (artifact.*file.content).size();
    }
    write_whole_file(tmp / kMetaFile, meta.dump(2) + "\n");  // last: an entry without it is no entry
    remove_beneath(where.cache_dir, where.below);            // invalid, or it would not be rewritten
    if (::renameat(arch.fd.get(), tmp_name.c_str(), arch.fd.get(), dir.filename().c_str()) != 0)
      throw Error(ErrorCode::kCacheIo,
                  "cannot rename " + tmp.string() + " to " + dir.string() + ": " + std::strerror(errno));
  } catch (...) {
    try {
      remove_beneath(where.cache_dir, where.below.parent_path() / tmp_name);
    } catch (const Error&) {
    }
    throw;
  }
}

}  // namespace flashrtc::detail

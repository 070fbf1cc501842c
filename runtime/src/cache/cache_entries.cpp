#include "flashrtc/cache_entries.hpp"

#include <sys/stat.h>

#include <algorithm>

#include "cache/cache_entry_layout.hpp"
#include "cache/cache_scan.hpp"
#include "flashrtc/error.hpp"
#include "support/bounded_read.hpp"
#include "support/json_checked.hpp"

namespace flashrtc {

namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {

namespace {

enum class ArchChild { kEntry, kTemporary, kLockFile };

std::vector<fs::path> arch_children(const fs::path& root, ArchChild kind) {
  std::vector<fs::path> found;
  std::error_code error;
  for (fs::directory_iterator arch(root, error), end; !error && arch != end; arch.increment(error)) {
    if (!arch->is_directory(error)) continue;
    std::error_code inner;
    for (fs::directory_iterator entry(arch->path(), inner); !inner && entry != end; entry.increment(inner)) {
      const std::string name = entry->path().filename().string();
      const bool directory = entry->is_directory(inner), hidden = name[0] == '.';
      const bool lock = !directory && entry->path().extension() == ".lock";
      if ((kind == ArchChild::kEntry && directory && !hidden) ||
          (kind == ArchChild::kTemporary && directory && hidden) || (kind == ArchChild::kLockFile && lock))
        found.push_back(entry->path());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string field_text(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

int int_field(const json& kernel, const char* name) {
  const auto it = kernel.find(name);
  return it != kernel.end() && it->is_number_integer() ? it->get<int>() : 0;
}

}  // namespace

std::vector<fs::path> cache_entry_dirs(const fs::path& root) {
  return arch_children(root, ArchChild::kEntry);
}

std::vector<fs::path> cache_temporaries(const fs::path& root) {
  return arch_children(root, ArchChild::kTemporary);
}

std::vector<fs::path> cache_lock_files(const fs::path& root) {
  return arch_children(root, ArchChild::kLockFile);
}

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
  e.key = printable_ascii(dir.filename().string());
  e.arch = printable_ascii(dir.parent_path().filename().string());
  e.cubin_path = dir / kCubinFile;
  e.ptx_path = dir / kPtxFile;
  e.log_path = dir / kLogFile;
  e.size_bytes = directory_bytes(dir);
  e.last_used_unix = modified_unix(dir / kMetaFile);
  EntryRead read = read_entry(dir);
  e.meta_json = std::move(read.meta_text);
  if (!read.artifact) {
    e.problem = read.problem;
    return e;
  }
  const KernelArtifact& artifact = *read.artifact;
  e.name_expression = artifact.inputs.name_expression;
  e.lowered_name = artifact.lowered_name;
  e.nvrtc_build = artifact.inputs.nvrtc_build;
  e.resources = artifact.resources;
  e.compile_ms = artifact.compile_ms;
  e.created_unix = read.created_unix;
  // read_entry checked the kernel fields: flat, strings, booleans and non-negative ints.
  const json& kernel = artifact.description;
  for (const auto& [name, value] : kernel.items()) e.kernel_fields.emplace_back(name, field_text(value));
  const auto text = [&](const char* name) {
    const auto it = kernel.find(name);
    return it != kernel.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  e.kernel = text("family");
  e.dtype = text("dtype");
  e.mask = text("mask");
  e.head_dim = int_field(kernel, "head_dim");
  e.tile = {int_field(kernel, "block_m"), int_field(kernel, "block_n"), int_field(kernel, "warps"),
            int_field(kernel, "stages")};
  e.smem_bytes = static_cast<std::size_t>(int_field(kernel, "smem_bytes"));
  return e;
}

std::string cache_entry_problem(const fs::path& dir) {
  return read_entry(dir).problem;
}

}  // namespace detail

std::vector<CacheEntry> list_cache_entries() {
  std::vector<CacheEntry> entries;
  for (const fs::path& dir : detail::cache_entry_dirs(cache_root()))
    entries.push_back(detail::read_cache_entry(dir));
  return entries;
}

std::string read_cache_entry_file(const fs::path& file) {
  detail::BoundedRead read = detail::read_file_bounded(file, detail::kMaxEntryFileBytes);
  if (!read.ok()) throw Error(ErrorCode::kCacheIo, "cannot read " + file.string() + ": it " + read.problem);
  return std::move(read.content);
}

CacheEntry find_cache_entry(std::string_view key_prefix) {
  if (key_prefix.empty())
    throw Error(ErrorCode::kInvalidArgument, "key: empty; give a key or a unique prefix of one");
  std::vector<fs::path> matches;
  for (const fs::path& dir : detail::cache_entry_dirs(cache_root()))
    if (dir.filename().string().rfind(key_prefix, 0) == 0) matches.push_back(dir);
  const std::string shown = detail::printable_ascii(key_prefix);
  if (matches.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "key=" + shown + ": no cache entry has this key or prefix in " + cache_root().string());
  if (matches.size() > 1) {
    std::string names;
    for (std::size_t i = 0; i < matches.size() && i < 8; ++i)
      names += (i ? ", " : "") + matches[i].parent_path().filename().string() + "/" +
               matches[i].filename().string();
    throw Error(ErrorCode::kInvalidArgument, "key=" + shown + ": matches " + std::to_string(matches.size()) +
                                                 " entries (" + detail::printable_ascii(names) +
                                                 (matches.size() > 8 ? ", ..." : "") +
                                                 "); give more characters");
  }
  return detail::read_cache_entry(matches.front());
}

}  // namespace flashrtc

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

enum class ArchChild { kEntry, kTemporary, kLockFile, kLinkedArch };

bool is_link(const fs::file_status& status) {
  return status.type() == fs::file_type::symlink;
}

// Nothing is followed: a link where an arch directory should be is listed (kLinkedArch), never walked, and
// a link in an entry's or a temporary's place is listed as one (reading it as an entry fails).
std::vector<fs::path> arch_children(const fs::path& root, ArchChild kind) {
  std::vector<fs::path> found;
  std::error_code error;
  if (fs::symlink_status(root, error).type() != fs::file_type::directory) return found;
  for (fs::directory_iterator arch(root, error), end; !error && arch != end; arch.increment(error)) {
    const fs::file_status arch_status = arch->symlink_status(error);
    if (is_link(arch_status) && kind == ArchChild::kLinkedArch) found.push_back(arch->path());
    if (arch_status.type() != fs::file_type::directory || kind == ArchChild::kLinkedArch) continue;
    std::error_code inner;
    for (fs::directory_iterator entry(arch->path(), inner); !inner && entry != end; entry.increment(inner)) {
      const std::string name = entry->path().filename().string();
      const fs::file_status status = entry->symlink_status(inner);
      const bool directory = status.type() == fs::file_type::directory;
      const bool lock = !directory && entry->path().extension() == ".lock";
      const bool hidden = name[0] == '.', dir_or_link = !lock && (directory || is_link(status));
      if ((kind == ArchChild::kEntry && dir_or_link && !hidden) ||
          (kind == ArchChild::kTemporary && dir_or_link && hidden) || (kind == ArchChild::kLockFile && lock))
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

std::vector<fs::path> cache_linked_directories(const fs::path& root) {
  std::error_code error;
  if (is_link(fs::symlink_status(root, error))) return {root};
  return arch_children(root, ArchChild::kLinkedArch);
}

std::uint64_t directory_bytes(const fs::path& dir) {
  std::uint64_t bytes = 0;
  std::error_code error;
  // The iterator would open a link given as dir; below it, it follows none.
  if (fs::symlink_status(dir, error).type() != fs::file_type::directory) return 0;
  for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end; it.increment(error))
    if (it->symlink_status(error).type() == fs::file_type::regular) bytes += it->file_size(error);
  return bytes;
}

std::int64_t modified_unix(const fs::path& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 ? static_cast<std::int64_t>(info.st_mtim.tv_sec) : 0;
}

CacheEntry read_cache_entry(const fs::path& dir) {
  CacheEntry e;
  e.dir = dir;
  e.key = printable_ascii(dir.filename().string());
  e.arch = printable_ascii(dir.parent_path().filename().string());
  e.cubin_path = dir / kCubinFile;
  e.ptx_path = dir / kPtxFile;
  e.log_path = dir / kLogFile;
  EntryRead read = read_entry(dir);
  e.size_bytes = directory_bytes(dir);
  // Not through a linked entry directory: its meta.json is no entry's.
  std::error_code error;
  if (fs::symlink_status(dir, error).type() == fs::file_type::directory)
    e.last_used_unix = modified_unix(dir / kMetaFile);
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

CacheFileHead read_cache_entry_file_head(const fs::path& file, std::size_t max_bytes) {
  detail::BoundedRead read = detail::read_file_head(file, max_bytes);
  if (!read.ok()) throw Error(ErrorCode::kCacheIo, "cannot read " + file.string() + ": it " + read.problem);
  CacheFileHead head{std::move(read.content), read.file_bytes};
  // Not inside a character: what is shown stays valid UTF-8 (JSON) where the file was.
  if (head.text.size() < head.total_bytes) {
    const std::string& text = head.text;
    std::size_t start = text.size();  // of the last character
    while (start > 0 && text.size() - start < 4 &&
           (static_cast<unsigned char>(text[start - 1]) & 0xC0) == 0x80)
      --start;
    if (start > 0) {
      const unsigned char lead = static_cast<unsigned char>(text[start - 1]);
      const std::size_t length = (lead >> 5) == 0x6    ? 2
                                 : (lead >> 4) == 0xE  ? 3
                                 : (lead >> 3) == 0x1E ? 4
                                                       : 1;
      if (start - 1 + length > text.size()) head.text.resize(start - 1);
    }
  }
  return head;
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

#include "cache/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "cache/cache_entry_layout.hpp"
#include "support/log.hpp"

namespace flashrtc::detail {

namespace fs = std::filesystem;

fs::path disk_cache_root(const fs::path& cache_dir) {
  return cache_dir / ("v" + std::to_string(kCacheFormatVersion));
}

DiskCache::DiskCache(fs::path root) : root_(std::move(root)) {}

fs::path DiskCache::entry_dir(const KeyInputs& inputs) const {
  return root_ / inputs.arch / inputs.key();
}

std::optional<KernelArtifact> DiskCache::load(const KeyInputs& inputs, std::string* problem) const {
  const fs::path dir = entry_dir(inputs);
  EntryRead read = read_entry(dir);
  std::string why = read.absent ? std::string() : read.problem;
  // read_entry checked that the key is the digest of the recorded inputs; equal inputs rule out a collision.
  if (why.empty() && read.artifact && read.artifact->inputs.to_json() != inputs.to_json())
    why = "meta.json describes another kernel";
  if (problem) *problem = why;
  if (!why.empty()) {
    if (!problem) warn_unusable_entry(dir, why);
    return std::nullopt;
  }
  if (!read.artifact) return std::nullopt;
  touch_entry(dir);
  return std::move(read.artifact);
}

fs::path DiskCache::store(const KernelArtifact& artifact) const {
  const fs::path dir = entry_dir(artifact.inputs);
  write_entry(dir, artifact);
  return dir;
}

DiskCache::KeyLock::KeyLock(const DiskCache& cache, const KeyInputs& inputs)
    : lock_(lock_entry_file(cache.entry_dir(inputs))) {}

void warn_unusable_entry(const fs::path& entry_dir, const std::string& problem) {
  log().warn("cache entry {} is unusable ({}): recompiling", entry_dir.string(), problem);
}

fs::path entry_lock_path(const fs::path& entry_dir) {
  return entry_dir.string() + ".lock";
}

FileLock lock_entry_file(const fs::path& entry_dir) {
  const EntryPath where = split_entry_path(entry_dir);
  return FileLock(where.cache_dir, where.below.parent_path() / entry_lock_path(entry_dir).filename());
}

void touch_entry(const fs::path& entry_dir) {
  // utimensat with null times sets "now" and needs only write permission, not ownership.
  // AT_SYMLINK_NOFOLLOW: a meta.json that was a link would not have loaded, but may be one by now.
  if (::utimensat(AT_FDCWD, (entry_dir / kMetaFile).c_str(), nullptr, AT_SYMLINK_NOFOLLOW) != 0)
    log().debug("cannot mark {} as used: {}", entry_dir.string(), std::strerror(errno));
}

}  // namespace flashrtc::detail

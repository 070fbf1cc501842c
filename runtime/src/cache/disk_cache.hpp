#pragma once
// The on-disk cubin cache: <cache_dir>/v<format>/<arch>/<key>/, one entry per key (cache_entry_layout.hpp
// says what an entry holds and how it is written and checked). Across processes a lock file per key
// serializes compiles of that key.
#include <filesystem>
#include <optional>
#include <string>

#include "compile/kernel_artifact.hpp"
#include "support/file_lock.hpp"

namespace flashrtc::detail {

class DiskCache {
 public:
  explicit DiskCache(std::filesystem::path root);  // root = <cache_dir>/v<format>

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path entry_dir(const KeyInputs& inputs) const;
  // A sound entry for inputs, or nullopt: missing (quietly), or damaged, stale or foreign. A damaged one is
  // logged as a warning, unless problem is given: then it says why ("" for a plain miss) and nothing is
  // logged. Never throws.
  std::optional<KernelArtifact> load(const KeyInputs& inputs, std::string* problem = nullptr) const;
  // Writes artifact atomically; replaces an invalid entry. Throws Error(kCacheIo) on I/O failure.
  std::filesystem::path store(const KernelArtifact& artifact) const;

  // Holds an exclusive advisory lock (flock) on the key's lock file while alive. Throws Error(kCacheIo)
  // when the lock file cannot be created (a read-only or missing cache directory, a symbolic link where
  // the lock file or one of its directories should be), naming what is wrong.
  class KeyLock {
   public:
    KeyLock(const DiskCache& cache, const KeyInputs& inputs);

   private:
    FileLock lock_;
  };

 private:
  std::filesystem::path root_;
};

// The lock file of the entry at entry_dir (a sibling: "<key>.lock"), which compiles and cache maintenance
// take.
std::filesystem::path entry_lock_path(const std::filesystem::path& entry_dir);

// Takes the lock of the entry at entry_dir (<cache_dir>/v<format>/<arch>/<key>): its lock file and the
// directories above it up to the cache directory are never symbolic links (split_entry_path). Throws
// Error(kCacheIo) as FileLock does, naming a link where a directory or the lock file should be.
FileLock lock_entry_file(const std::filesystem::path& entry_dir);

// Marks the entry at entry_dir as used now (meta.json's modification time), for `cache ls` and `prune`.
// Best effort: a read-only cache stays as it is.
void touch_entry(const std::filesystem::path& entry_dir);

// The warning for a damaged, stale or foreign entry that is about to be recompiled.
void warn_unusable_entry(const std::filesystem::path& entry_dir, const std::string& problem);

// <cache_dir>/v<kCacheFormatVersion>
std::filesystem::path disk_cache_root(const std::filesystem::path& cache_dir);

}  // namespace flashrtc::detail

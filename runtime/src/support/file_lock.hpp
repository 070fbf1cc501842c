#pragma once
// An exclusive advisory lock (flock) on a file, for files that several processes update: cache entries,
// the tuning database. flock is per open file, so threads of one process exclude each other as well.
#include <filesystem>
#include <string>

#include "support/beneath.hpp"

namespace flashrtc::detail {

class FileLock {
 public:
  // Creates path (and its directory) if missing, then blocks until the lock is held on the file that path
  // names at that moment (a holder may remove the file: see remove_file). Throws Error(kCacheIo) naming
  // errno's text when the directory or the file cannot be created (a read-only cache) or locked, or when
  // path is a symbolic link.
  explicit FileLock(const std::filesystem::path& path);
  // The lock file base/relative, where base is trusted and no component of relative may be a symbolic link
  // (open_directory_beneath): missing directories are created below base, never through a link.
  FileLock(const std::filesystem::path& base, const std::filesystem::path& relative);
  ~FileLock() = default;  // closing the file releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Removes the lock file while the lock is held, so that no lock file outlives what it guarded. Safe:
  // a process waiting on the removed file finds it gone once it gets the lock, and locks a new one.
  // Best effort: a file that cannot be removed stays, as a lock file.
  void remove_file();

 private:
  std::filesystem::path path_;  // for messages
  Fd dir_;                      // the lock file's directory, which names it for every later step
  std::string name_;
  Fd file_;
};

}  // namespace flashrtc::detail

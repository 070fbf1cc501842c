#pragma once
// An exclusive advisory lock (flock) on a file, for files that several processes update: cache entries,
// the tuning database. flock is per open file, so threads of one process exclude each other as well.
#include <filesystem>

namespace flashrtc::detail {

class FileLock {
 public:
  // Creates path (and its directory) if missing, then blocks until the lock is held.
  // Throws Error(kCacheIo) when the file cannot be opened or locked.
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();  // closing the file releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace flashrtc::detail

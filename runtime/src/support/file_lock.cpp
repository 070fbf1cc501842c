#include "support/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "flashrtc/error.hpp"

namespace flashrtc::detail {

FileLock::FileLock(const std::filesystem::path& path) : path_(path) {
  std::error_code error;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), error);
  if (error)
    throw Error(ErrorCode::kCacheIo,
                "cannot create directory " + path.parent_path().string() + ": " + error.message());
  for (;;) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw Error(ErrorCode::kCacheIo,
                  "cannot open lock file " + path.string() + ": " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd_);
      fd_ = -1;
      throw Error(ErrorCode::kCacheIo, "cannot lock " + path.string() + ": " + std::strerror(saved));
    }
    // The lock guards the file that path names now; a holder that removed it left us a lock on nothing.
    struct stat held {
    }, named{};
    if (::stat(path.c_str(), &named) != 0 && errno != ENOENT) return;  // cannot tell: keep the lock held
    if (::fstat(fd_, &held) != 0 || (held.st_dev == named.st_dev && held.st_ino == named.st_ino)) return;
    ::close(fd_);
    fd_ = -1;
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

void FileLock::remove_file() {
  if (fd_ >= 0) ::unlink(path_.c_str());
}

}  // namespace flashrtc::detail

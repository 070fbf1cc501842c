#include "support/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace fs = std::filesystem;

FileLock::FileLock(const fs::path& path) : FileLock(path.parent_path(), path.filename()) {}

FileLock::FileLock(const fs::path& base, const fs::path& relative)
    : path_(base / relative), name_(relative.filename().string()) {
  OpenedDir dir = open_directory_beneath(base, relative.parent_path(), true);
  if (!dir.ok())
    throw Error(ErrorCode::kCacheIo,
                "cannot open the directory of lock file " + path_.string() + ": " + dir.problem);
  dir_ = std::move(dir.fd);
  for (;;) {
    // O_NOFOLLOW: a link would make us create and lock whatever file it names.
    file_ = Fd(::openat(dir_.get(), name_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!file_.valid())
      throw Error(ErrorCode::kCacheIo, "cannot open lock file " + path_.string() + ": " +
                                           (errno == ELOOP ? std::string("it is a symbolic link; remove it")
                                                           : std::string(std::strerror(errno))));
    while (::flock(file_.get(), LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      file_ = Fd();
      throw Error(ErrorCode::kCacheIo, "cannot lock " + path_.string() + ": " + std::strerror(saved));
    }
    // The lock guards the file that the name names now; a holder that removed it left us a lock on nothing.
    struct stat held {
    }, named{};
    if (::fstatat(dir_.get(), name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 && errno != ENOENT)
      return;  // cannot tell: keep the lock held
    if (::fstat(file_.get(), &held) != 0 || (held.st_dev == named.st_dev && held.st_ino == named.st_ino))
      return;
    file_ = Fd();
  }
}

void FileLock::remove_file() {
  if (file_.valid()) ::unlinkat(dir_.get(), name_.c_str(), 0);
}

}  // namespace flashrtc::detail

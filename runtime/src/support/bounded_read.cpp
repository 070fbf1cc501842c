#include "support/bounded_read.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace flashrtc {

namespace {

// Closes the descriptor it owns.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

BoundedRead read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes) {
  BoundedRead result;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: a link is not what was written.
  const Fd file{::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) {
    const int error = errno;
    // ENOTDIR: a parent is no directory, so the file is not there either.
    result.missing = error == ENOENT || error == ENOTDIR;
    result.problem = error == ELOOP   ? "is a symbolic link"
                     : result.missing ? "missing"
                                      : std::strerror(error);
    return result;
  }
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) {
    result.problem = std::strerror(errno);
    return result;
  }
  if (!S_ISREG(info.st_mode)) {
    result.problem = "is not a regular file";
    return result;
  }
  const std::string limit_text = "is larger than its limit of " + std::to_string(max_bytes) + " bytes";
  if (static_cast<std::uint64_t>(info.st_size) > max_bytes) {
    result.problem = limit_text;
    return result;
  }
  // The file may grow while we read: the limit holds for what is read, not for what fstat said.
  result.content.reserve(static_cast<std::size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(file.fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      result.problem = std::strerror(errno);
      break;
    }
    if (got == 0) break;
    if (result.content.size() + static_cast<std::size_t>(got) > max_bytes) {
      result.problem = limit_text;
      break;
    }
    result.content.append(buffer, static_cast<std::size_t>(got));
  }
  if (!result.ok()) result.content.clear();
  return result;
}

}  // namespace flashrtc

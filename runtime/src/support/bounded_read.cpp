#include "support/bounded_read.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "support/beneath.hpp"

namespace flashrtc {

namespace {

// O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: a link is not what was written.
constexpr int kOpenFlags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;

struct Limits {
  std::uint64_t max_bytes;                      // a larger file is refused
  bool head_only = false;                       // or: read up to max_bytes of a file of any size
  std::optional<std::uint64_t> expected_bytes;  // a file of another size is refused unread
};

// Reads what the descriptor fd (opened with kOpenFlags; errno set when it failed) holds within limits.
BoundedRead read_open_file(const detail::Fd& file, const Limits& limits) {
  BoundedRead result;
  if (!file.valid()) {
    const int error = errno;
    // ENOTDIR: a parent is no directory, so the file is not there either.
    result.missing = error == ENOENT || error == ENOTDIR;
    result.problem = error == ELOOP   ? "is a symbolic link"
                     : result.missing ? "missing"
                                      : std::strerror(error);
    return result;
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) {
    result.problem = std::strerror(errno);
    return result;
  }
  if (!S_ISREG(info.st_mode)) {
    result.problem = "is not a regular file";
    return result;
  }
  result.file_bytes = static_cast<std::uint64_t>(info.st_size);
  const std::string limit_text = "is larger than its limit of " + std::to_string(limits.max_bytes) + " bytes";
  if (!limits.head_only && result.file_bytes > limits.max_bytes) {
    result.problem = limit_text;
    return result;
  }
  if (limits.expected_bytes && result.file_bytes != *limits.expected_bytes) {
    result.problem = "has the wrong size: " + std::to_string(result.file_bytes) + " bytes, not the " +
                     std::to_string(*limits.expected_bytes) + " recorded (truncated?)";
    return result;
  }
  // The file may grow while we read: the limit holds for what is read, not for what fstat said.
  result.content.reserve(static_cast<std::size_t>(std::min(result.file_bytes, limits.max_bytes)));
  char buffer[1 << 16];
  for (;;) {
    std::size_t want = sizeof(buffer);
    if (limits.head_only) {
      const std::uint64_t left = limits.max_bytes - result.content.size();
      if (left == 0) break;
      want = static_cast<std::size_t>(std::min<std::uint64_t>(want, left));
    }
    const ssize_t got = ::read(file.get(), buffer, want);
    if (got < 0) {
      if (errno == EINTR) continue;
      result.problem = std::strerror(errno);
      break;
    }
    if (got == 0) break;
    if (result.content.size() + static_cast<std::size_t>(got) > limits.max_bytes) {
      result.problem = limit_text;
      break;
    }
    result.content.append(buffer, static_cast<std::size_t>(got));
  }
  if (!result.ok()) result.content.clear();
  return result;
}

}  // namespace

BoundedRead read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes) {
  return read_open_file(detail::Fd(::open(path.c_str(), kOpenFlags)), {max_bytes, false, std::nullopt});
}

namespace detail {

BoundedRead read_file_bounded_at(int dir, const std::string& name, std::uint64_t max_bytes,
                                 std::optional<std::uint64_t> expected_bytes) {
  return read_open_file(Fd(::openat(dir, name.c_str(), kOpenFlags)), {max_bytes, false, expected_bytes});
}

BoundedRead read_file_head(const std::filesystem::path& path, std::uint64_t head_bytes) {
  return read_open_file(Fd(::open(path.c_str(), kOpenFlags)), {head_bytes, true, std::nullopt});
}

}  // namespace detail

}  // namespace flashrtc

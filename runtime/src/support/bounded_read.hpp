#pragma once
// Reading a file that someone else may have replaced with anything: a link to /dev/zero, a FIFO, a
// 24 GB file. Only regular files, never through a final symbolic link, never more than a limit.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace flashrtc::detail {

struct BoundedRead {
  std::string content;
  std::uint64_t file_bytes = 0;  // the file's size when it was opened (content may hold less: read_file_head)
  bool missing = false;          // no such file (problem says so too)
  std::string problem;  // empty when content is the whole file (or its head); else why not, e.g. "is not a
                        // regular file"
  bool ok() const { return problem.empty(); }
};

// The whole of path when it is a regular file of at most max_bytes. Never throws, never blocks on a FIFO,
// never reads more than max_bytes + 1 bytes.
BoundedRead read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes);

// As read_file_bounded, for the file name in the directory open as dir (open_directory_beneath). With
// expected_bytes, a file of another size is refused before a byte of it is read ("has the wrong size: ...").
BoundedRead read_file_bounded_at(int dir, const std::string& name, std::uint64_t max_bytes,
                                 std::optional<std::uint64_t> expected_bytes = std::nullopt);

// The first head_bytes of path (all of it when smaller), a regular file reached without a final symbolic
// link, of any size; file_bytes says how large it is. Never reads more than head_bytes.
BoundedRead read_file_head(const std::filesystem::path& path, std::uint64_t head_bytes);

}  // namespace flashrtc::detail

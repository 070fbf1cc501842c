#pragma once
// Reading a file that someone else may have replaced with anything: a link to /dev/zero, a FIFO, a
// 24 GB file. Only regular files, never through a final symbolic link, never more than a limit. The runtime
// reads its cache and tuning database with it, the tools what the user names (`bench --from`).
#include <cstdint>
#include <filesystem>
#include <string>

#include "flashrtc/export.hpp"

namespace flashrtc {

struct BoundedRead {
  std::string content;
  std::uint64_t file_bytes = 0;  // the file's size when it was opened (content may hold less: a head read)
  bool missing = false;          // no such file (problem says so too)
  std::string problem;  // empty when content is the whole file (or its head); else why not, e.g. "is not a
                        // regular file"
  bool ok() const { return problem.empty(); }
};

// The whole of path when it is a regular file of at most max_bytes. Never throws, never blocks on a FIFO,
// never reads more than max_bytes + 1 bytes.
FLASHRTC_API BoundedRead read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes);

}  // namespace flashrtc

#pragma once
// The bounded reader under the name the runtime's own files use (it is public, flashrtc/bounded_read.hpp, for
// the tools, which read files the user names), and the cache's variants of it.
#include <cstdint>
#include <optional>
#include <string>

#include "flashrtc/bounded_read.hpp"

namespace flashrtc::detail {

using flashrtc::BoundedRead;
using flashrtc::read_file_bounded;

// As read_file_bounded, for the file name in the directory open as dir (open_directory_beneath). With
// expected_bytes, a file of another size is refused before a byte of it is read ("has the wrong size: ...").
BoundedRead read_file_bounded_at(int dir, const std::string& name, std::uint64_t max_bytes,
                                 std::optional<std::uint64_t> expected_bytes = std::nullopt);

// The first head_bytes of path (all of it when smaller), a regular file reached without a final symbolic
// link, of any size; file_bytes says how large it is. Never reads more than head_bytes.
BoundedRead read_file_head(const std::filesystem::path& path, std::uint64_t head_bytes);

}  // namespace flashrtc::detail

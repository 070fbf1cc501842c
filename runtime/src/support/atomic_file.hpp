#pragma once
// Writing files that other processes read while we write: new files under a temporary name, then one
// rename. Used by the disk cache (whole entry directories) and the tuning database (one file).
#include <filesystem>
#include <string>
#include <string_view>

namespace flashrtc::detail {

// "<pid>-<64 random bits in hex>": a name part no other process or thread picks at the same time.
std::string unique_temp_suffix();

// Creates (or truncates) path and writes content. Throws Error(kCacheIo) naming the file and errno's text.
void write_whole_file(const std::filesystem::path& path, std::string_view content);

// Replaces path by a file holding content: written as a dot-prefixed sibling, then renamed over path, so a
// reader sees the old file or the new one, never a part (a kill -9 leaves only the temporary behind).
// Throws Error(kCacheIo) naming what failed; the temporary is removed then.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

}  // namespace flashrtc::detail

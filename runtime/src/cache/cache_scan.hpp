#pragma once
// Finding disk cache entries for inspection and maintenance (flashrtc/cache_entries.hpp). Whether an entry
// is sound is read_entry's answer (cache_entry_layout.hpp), the same one a load gets.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "flashrtc/cache_entries.hpp"

namespace flashrtc::detail {

// Nothing here follows a symbolic link below root (root included): a link is listed where it stands, as
// what its place says it is, and never walked into.

// Entry directories of every arch under root: not the dot-prefixed temporaries, not the lock files. A link
// in an entry's place is listed too: read as an entry, it is a bad one.
std::vector<std::filesystem::path> cache_entry_dirs(const std::filesystem::path& root);

// Dot-prefixed temporaries that a store leaves behind when a process dies mid-write.
std::vector<std::filesystem::path> cache_temporaries(const std::filesystem::path& root);

// Lock files ("<key>.lock") of every arch under root, links named so included.
std::vector<std::filesystem::path> cache_lock_files(const std::filesystem::path& root);

// Links where the cache has directories: root itself, or else its arch directories.
std::vector<std::filesystem::path> cache_linked_directories(const std::filesystem::path& root);

// The entry at dir as list_cache_entries shows it; problem set when it is bad. Never throws.
CacheEntry read_cache_entry(const std::filesystem::path& dir);

// Empty when a load would trust the entry at dir; otherwise the first thing wrong. Never throws.
std::string cache_entry_problem(const std::filesystem::path& dir);

// The bytes of the regular files under dir; 0 when dir is a link.
std::uint64_t directory_bytes(const std::filesystem::path& dir);
// Modification time in seconds since the epoch; 0 when it cannot be read.
std::int64_t modified_unix(const std::filesystem::path& path);

}  // namespace flashrtc::detail

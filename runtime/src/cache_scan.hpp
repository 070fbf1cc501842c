#pragma once
// Reading disk cache entries for inspection and maintenance (flashrtc/cache_entries.hpp), with the same
// trust rules as DiskCache::load.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "flashrtc/cache_entries.hpp"

namespace flashrtc::detail {

// Entry directories of every arch under root: not the dot-prefixed temporaries, not the lock files.
std::vector<std::filesystem::path> cache_entry_dirs(const std::filesystem::path& root);

// Dot-prefixed temporaries that DiskCache::store leaves behind when a process dies mid-write.
std::vector<std::filesystem::path> cache_temporaries(const std::filesystem::path& root);

// What meta.json says about the entry at dir; problem set when it cannot be read. Never throws.
CacheEntry read_cache_entry(const std::filesystem::path& dir);

// Empty when DiskCache::load would trust the entry at dir and its key is the digest of its inputs;
// otherwise the first thing wrong. Never throws.
std::string cache_entry_problem(const std::filesystem::path& dir);

std::uint64_t directory_bytes(const std::filesystem::path& dir);
// Modification time in seconds since the epoch; 0 when it cannot be read.
std::int64_t modified_unix(const std::filesystem::path& path);

}  // namespace flashrtc::detail

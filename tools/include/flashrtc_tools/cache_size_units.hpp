#pragma once
// `flashrtc cache prune` arguments: "30d", "12h", "90m", "45s" and "500M", "2G", "64K", "1000".
#include <cstdint>
#include <string>

namespace flashrtc::tools {

/// Seconds in a duration with a unit (s, m, h, d, w). Throws UsageError naming the option.
std::int64_t parse_duration_seconds(const std::string& text, const char* option);

/// Bytes in a size, plain or with a binary unit (K, M, G, T; "MB", "MiB" alike). Throws UsageError.
std::uint64_t parse_size_bytes(const std::string& text, const char* option);

}  // namespace flashrtc::tools

#pragma once
// Sizes and times as the tools print them.
#include <cstdint>
#include <string>

namespace flashrtc::tools {

/// "1.5 GiB", "48.0 KiB", "512 B".
std::string format_bytes(double bytes);

/// "2025-06-01 14:03" in local time; "-" for 0 or less.
std::string format_time(std::int64_t unix_seconds);

}  // namespace flashrtc::tools

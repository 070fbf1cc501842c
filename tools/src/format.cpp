#include "flashrtc_tools/format.hpp"

#include <time.h>

#include <cstdio>
#include <ctime>

namespace flashrtc::tools {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

std::string format_time(std::int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  const time_t t = static_cast<time_t>(unix_seconds);
  tm parts{};
  localtime_r(&t, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M", &parts);
  return text;
}

}  // namespace flashrtc::tools

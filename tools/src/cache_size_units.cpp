#include "flashrtc_tools/cache_size_units.hpp"

#include <cctype>
#include <charconv>

#include "flashrtc_tools/tool_errors.hpp"

namespace flashrtc::tools {

namespace {

// The leading number and the rest, lower-cased; nullopt when there is no number.
bool split(const std::string& text, std::uint64_t& number, std::string& unit) {
  const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (status != std::errc() || end == text.data()) return false;
  unit.clear();
  for (const char* c = end; c != text.data() + text.size(); ++c)
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  return true;
}

}  // namespace

std::int64_t parse_duration_seconds(const std::string& text, const char* option) {
  std::uint64_t number = 0;
  std::string unit;
  if (split(text, number, unit)) {
    const std::uint64_t scale = unit == "s"   ? 1
                                : unit == "m" ? 60
                                : unit == "h" ? 3600
                                : unit == "d" ? 86400
                                : unit == "w" ? 7 * 86400
                                              : 0;
    if (scale && number <= (std::uint64_t{1} << 40)) return static_cast<std::int64_t>(number * scale);
  }
  throw UsageError(std::string(option) + "=" + text +
                   ": expected a number and a unit (s, m, h, d, w), e.g. 30d");
}

std::uint64_t parse_size_bytes(const std::string& text, const char* option) {
  std::uint64_t number = 0;
  std::string unit;
  if (split(text, number, unit)) {
    if (unit.size() > 1 && (unit.substr(1) == "b" || unit.substr(1) == "ib")) unit = unit.substr(0, 1);
    const int shift = unit.empty() || unit == "b" ? 0
                      : unit == "k"               ? 10
                      : unit == "m"               ? 20
                      : unit == "g"               ? 30
                      : unit == "t"               ? 40
                                                  : -1;
    if (shift >= 0 && number <= (~std::uint64_t{0} >> shift)) return number << shift;
  }
  throw UsageError(std::string(option) + "=" + text +
                   ": expected bytes with an optional unit (K, M, G, T), e.g. 2G");
}

}  // namespace flashrtc::tools

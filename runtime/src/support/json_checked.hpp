#pragma once
// Reading JSON that a person or a crash may have mangled (cache metadata, the tuning database): nesting
// is bounded before the parser sees the text, and numbers are taken only when they fit, never truncated.
// Every reader throws std::invalid_argument (or nlohmann's exceptions) with a message fit for a log line.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace flashrtc::detail {

// More levels than any file flashrtc writes (they nest 3 deep); far fewer than could exhaust a stack.
inline constexpr int kMaxJsonDepth = 32;

// Parses text; throws std::invalid_argument when arrays and objects nest deeper than max_depth (checked
// first, without recursion), nlohmann::json::parse_error for malformed text or invalid UTF-8.
nlohmann::json parse_json_bounded(std::string_view text, int max_depth = kMaxJsonDepth);

// object[name] as an integer from min to max. A float (1e30), a string ("big") or an integer out of range
// (2^32 + 64 for an int) is an error naming the field, its value and the range.
std::int64_t json_integer(const nlohmann::json& object, const char* name, std::int64_t min, std::int64_t max);
// As json_integer, for int fields of any non-negative meaning: 0 to 2^31 - 1.
int json_int(const nlohmann::json& object, const char* name, int min = 0);
// object[name] as a string.
std::string json_string(const nlohmann::json& object, const char* name);
// object[name] as a boolean (not 0 or 1, not "true").
bool json_bool(const nlohmann::json& object, const char* name);
// object[name] as a finite number from min to max.
double json_number(const nlohmann::json& object, const char* name, double min, double max);

// text with every byte outside printable ASCII replaced by '?': for messages that quote a file's bytes,
// which may be invalid UTF-8 that a JSON writer would refuse.
std::string printable_ascii(std::string_view text);

}  // namespace flashrtc::detail

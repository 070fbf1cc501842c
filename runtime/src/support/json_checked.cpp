#include "support/json_checked.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace flashrtc::detail {

using nlohmann::json;

namespace {

const json& field(const json& object, const char* name) {
  if (!object.is_object())
    throw std::invalid_argument(std::string("not an object where ") + name + " belongs");
  const auto it = object.find(name);
  if (it == object.end()) throw std::invalid_argument(std::string(name) + " missing");
  return *it;
}

std::string number_text(double number) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", number);
  return text;
}

std::string value_text(const json& value) {
  const std::string text = printable_ascii(value.dump());
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

}  // namespace

json parse_json_bounded(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        throw std::invalid_argument("nests deeper than " + std::to_string(max_depth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return json::parse(text);
}

std::int64_t json_integer(const json& object, const char* name, std::int64_t min, std::int64_t max) {
  const json& value = field(object, name);
  const auto out_of_range = [&] {
    return std::invalid_argument(std::string(name) + "=" + value_text(value) + ": must be an integer from " +
                                 std::to_string(min) + " to " + std::to_string(max));
  };
  if (!value.is_number_integer()) throw out_of_range();
  if (value.is_number_unsigned()) {
    const std::uint64_t u = value.get<std::uint64_t>();
    if (max < 0 || u > static_cast<std::uint64_t>(max) || static_cast<std::int64_t>(u) < min)
      throw out_of_range();
    return static_cast<std::int64_t>(u);
  }
  const std::int64_t i = value.get<std::int64_t>();
  if (i < min || i > max) throw out_of_range();
  return i;
}

int json_int(const json& object, const char* name, int min) {
  return static_cast<int>(json_integer(object, name, min, std::numeric_limits<int>::max()));
}

std::string json_string(const json& object, const char* name) {
  const json& value = field(object, name);
  if (!value.is_string())
    throw std::invalid_argument(std::string(name) + "=" + value_text(value) + ": must be a string");
  return value.get<std::string>();
}

bool json_bool(const json& object, const char* name) {
  const json& value = field(object, name);
  if (!value.is_boolean())
    throw std::invalid_argument(std::string(name) + "=" + value_text(value) + ": must be true or false");
  return value.get<bool>();
}

double json_number(const json& object, const char* name, double min, double max) {
  const json& value = field(object, name);
  const double number = value.is_number() ? value.get<double>() : std::nan("");
  if (!std::isfinite(number) || number < min || number > max)
    throw std::invalid_argument(std::string(name) + "=" + value_text(value) + ": must be a number from " +
                                number_text(min) + " to " + number_text(max));
  return number;
}

std::string printable_ascii(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return out;
}

}  // namespace flashrtc::detail

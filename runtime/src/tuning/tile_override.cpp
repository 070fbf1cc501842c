// FLASHRTC_CONFIG's syntax: "block_m=64,block_n=64,warps=4,stages=2", any subset.
#include <charconv>
#include <string>

#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"

namespace flashrtc {

namespace {

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

}  // namespace

TileConfig TileOverride::apply(TileConfig base) const {
  if (block_m) base.block_m = *block_m;
  if (block_n) base.block_n = *block_n;
  if (warps) base.warps = *warps;
  if (stages) base.stages = *stages;
  return base;
}

TileOverride parse_tile_override(std::string_view text, std::string_view origin) {
  const std::string where = std::string(origin) + "='" + std::string(text) + "'";
  const auto fail = [&](const std::string& why) { throw Error(ErrorCode::kInvalidArgument, where + ": " + why); };
  TileOverride result;
  if (trim(text).empty()) return result;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string_view item = trim(text.substr(start, end - start));
    start = end + 1;
    if (item.empty()) fail("empty item (expected field=value, e.g. block_m=64)");
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) fail("'" + std::string(item) + "': expected field=value, e.g. block_m=64");
    const std::string field(trim(item.substr(0, eq)));
    const std::string_view value = trim(item.substr(eq + 1));
    std::optional<int>* slot = field == "block_m"   ? &result.block_m
                               : field == "block_n" ? &result.block_n
                               : field == "warps"   ? &result.warps
                               : field == "stages"  ? &result.stages
                                                    : nullptr;
    if (!slot) fail("unknown field '" + field + "' (block_m, block_n, warps, stages)");
    if (slot->has_value()) fail(field + " given twice");
    int number = 0;
    const auto [parsed_end, status] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (value.empty() || status != std::errc() || parsed_end != value.data() + value.size())
      fail(field + "='" + std::string(value) + "': not an integer");
    *slot = number;
  }
  return result;
}

}  // namespace flashrtc

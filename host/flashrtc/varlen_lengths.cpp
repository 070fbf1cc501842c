#include "varlen_lengths.hpp"

#include <algorithm>
#include <numeric>
#include <random>

#include "cli_support.hpp"

namespace flashrtc::cli {

namespace {

std::int64_t parse_length(const std::string& text, const std::string& spec) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < 1 || value > kMaxVarlenTokens)
    throw UsageError("--lengths " + spec + ": '" + text + "' is not a length from 1 to " +
                     std::to_string(kMaxVarlenTokens));
  return value;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t at; (at = text.find(separator, start)) != std::string::npos; start = at + 1)
    parts.push_back(text.substr(start, at - start));
  parts.push_back(text.substr(start));
  return parts;
}

}  // namespace

std::vector<std::int64_t> varlen_lengths(const std::string& spec, std::int64_t total_tokens,
                                         std::uint64_t seed) {
  if (total_tokens < 1 || total_tokens > kMaxVarlenTokens)
    throw UsageError("--total-tokens must be from 1 to " + std::to_string(kMaxVarlenTokens));
  const std::vector<std::string> parts = split(spec, ':');
  std::vector<std::int64_t> lengths;
  if (parts[0] == "uniform") {
    if (parts.size() != 3) throw UsageError("--lengths " + spec + ": expected uniform:LO:HI");
    const std::int64_t lo = parse_length(parts[1], spec), hi = parse_length(parts[2], spec);
    if (lo > hi) throw UsageError("--lengths " + spec + ": LO is above HI");
    std::mt19937_64 generator(seed);
    std::uniform_int_distribution<std::int64_t> draw(lo, hi);
    for (std::int64_t sum = 0; sum < total_tokens;) {
      lengths.push_back(std::min(draw(generator), total_tokens - sum));
      sum += lengths.back();
    }
    return lengths;
  }
  if (parts[0] == "equal") {
    if (parts.size() != 2) throw UsageError("--lengths " + spec + ": expected equal:L");
    const std::int64_t length = parse_length(parts[1], spec);
    if (length > total_tokens) throw UsageError("--lengths " + spec + ": L is above --total-tokens");
    return std::vector<std::int64_t>(static_cast<std::size_t>(total_tokens / length), length);
  }
  if (parts.size() != 1)
    throw UsageError("--lengths " + spec + ": expected uniform:LO:HI, equal:L or N1,N2,...");
  for (const std::string& text : split(spec, ',')) lengths.push_back(parse_length(text, spec));
  if (std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0}) > kMaxVarlenTokens)
    throw UsageError("--lengths " + spec + ": more than " + std::to_string(kMaxVarlenTokens) + " tokens");
  return lengths;
}

std::string describe_lengths(const std::vector<std::int64_t>& lengths) {
  const auto [lo, hi] = std::minmax_element(lengths.begin(), lengths.end());
  const std::int64_t total = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  std::string text =
      std::to_string(lengths.size()) + (lengths.size() == 1 ? " sequence of " : " sequences of ");
  text += *lo == *hi ? std::to_string(*lo) : std::to_string(*lo) + ".." + std::to_string(*hi);
  return text + ", " + std::to_string(total) + " tokens";
}

}  // namespace flashrtc::cli

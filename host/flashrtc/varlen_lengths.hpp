#pragma once
// `--lengths` of `bench --op varlen`: the sequence lengths of one packed batch, as bench/compare.py --op
// varlen spells them (the same grammar; a uniform draw differs between the two, each seeded).
#include <cstdint>
#include <string>
#include <vector>

namespace flashrtc::cli {

/// "uniform:LO:HI": lengths drawn uniformly from [LO, HI] with seed until total_tokens, the last one cut to
/// fit; "equal:L": total_tokens / L sequences of L; "N1,N2,...": these lengths. A UsageError for anything
/// else, a length below 1, or a batch over kMaxVarlenTokens tokens.
std::vector<std::int64_t> varlen_lengths(const std::string& spec, std::int64_t total_tokens,
                                         std::uint64_t seed);

/// The tokens one bench batch may hold (the int32 prefix sums of cu_seqlens with room to spare).
inline constexpr std::int64_t kMaxVarlenTokens = std::int64_t{1} << 28;

/// "14 sequences of 459..8037, 65536 tokens".
std::string describe_lengths(const std::vector<std::int64_t>& lengths);

}  // namespace flashrtc::cli

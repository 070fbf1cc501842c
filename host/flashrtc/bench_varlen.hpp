#pragma once
// `flashrtc bench --op varlen`: attention_varlen_forward timed over one packed batch of ragged lengths per
// dtype x head dim x mask.
#include <cstdint>
#include <optional>
#include <vector>

#include "shared_options.hpp"

namespace flashrtc::cli {

struct VarlenBenchOptions {
  std::vector<DType> dtypes;
  std::vector<MaskKind> masks;
  std::vector<std::int64_t> head_dims;
  std::vector<std::int64_t> lengths;     ///< of the sequences, queries and keys alike
  std::optional<std::int64_t> heads;     ///< default: the grid's, 2048 / d
  std::optional<std::int64_t> heads_kv;  ///< default: heads
  const TileOptions* tile = nullptr;
  const TargetOptions* target = nullptr;
  int warmup = 10, iters = 100;
  bool no_l2_flush = false, lse = false, json = false, dry_run = false;
  std::uint64_t seed = 1;
};

/// Checks every point (a usage error naming it), then lists them (dry run) or times them on the GPU in hand.
/// Returns the command's exit code.
int run_varlen_bench(const VarlenBenchOptions& o);

}  // namespace flashrtc::cli

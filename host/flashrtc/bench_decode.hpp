#pragma once
// `flashrtc bench --op decode`: attention_with_kvcache timed over a cache of each described shape.
#include <cstdint>
#include <string>
#include <vector>

#include "decode_call.hpp"

namespace flashrtc::cli {

struct DecodeBenchOptions {
  std::vector<DType> dtypes;
  std::vector<MaskKind> masks;
  std::vector<std::int64_t> head_dims;
  const DecodeOptions* decode = nullptr;
  const TileOptions* tile = nullptr;
  const TargetOptions* target = nullptr;
  int warmup = 10, iters = 100;
  bool no_l2_flush = false, lse = false, json = false, dry_run = false;
  std::uint64_t seed = 1;
};

/// Every dtype x head dim x mask x the decode options' shapes, in that order.
std::vector<DecodeShape> decode_bench_points(const DecodeBenchOptions& o);

/// Checks every point (a usage error naming it), then lists them (dry run) or times them on the GPU in hand.
/// Returns the command's exit code.
int run_decode_bench(const DecodeBenchOptions& o);

}  // namespace flashrtc::cli

#pragma once
// Whether a backward call takes the fused main kernel (dK, dV and dQ added into an fp32 workspace) or the
// deterministic pair, which tile its config may name, and the scratch it runs with: one rule for the dense
// backward and the varlen one (backward_operations, varlen_backward_operations).
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "driver/stream_scratch.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc::detail {

struct FusedBackwardQuery {
  bool deterministic = false;
  DType dtype = DType::kFloat16;
  int head_dim = 0;
  MaskKind mask = MaskKind::kNone;
  std::int64_t seqlen_kv = 0;  ///< the keys a block sees at most (max_seqlen_k for a packed call); 0: unknown
  const std::optional<TileConfig>* config = nullptr;  ///< the main kernel's explicit tile
  Operation two_kernel = Operation::kBackward;        ///< the pair's main kernel
  Operation fused = Operation::kBackwardFused;
};

bool takes_fused_backward(const FusedBackwardQuery& query, std::string_view arch, unsigned traits);

// What is wrong with tile as the main kernel's config (empty: nothing): a tile no family of the pair's main
// kernel builds, unless the call is not deterministic and the fused family takes it (the config then names
// the fused kernel).
std::string main_tile_problem(const FusedBackwardQuery& query, const TileConfig& tile);

// The backward's stream-ordered scratch: D = rowsum(dO * O) for `rows` rows, then (dq_floats > 0) the fused
// kernel's fp32 dQ workspace, zeroed on the stream before any kernel adds into it. Freed (stream-ordered)
// when this owner goes out of scope, after the kernels queued before.
struct BackwardScratch {
  Scratch owner;
  float* d_rows = nullptr;
  float* dq_accum = nullptr;  // null without a workspace
};
BackwardScratch backward_scratch(std::size_t rows, std::size_t dq_floats, CUstream stream);

}  // namespace flashrtc::detail

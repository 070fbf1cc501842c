#pragma once
// Whether a backward call takes the fused main kernel (dK, dV and dQ added into an fp32 workspace) or the
// deterministic pair: one rule for the dense backward and the varlen one (backward_operations,
// varlen_backward_operations).
#include <cstdint>
#include <optional>
#include <string_view>

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

}  // namespace flashrtc::detail

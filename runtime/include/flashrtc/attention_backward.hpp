#pragma once
/// Backward attention: given dO for o = softmax(scale * q k^T + mask) v, the gradients dQ, dK and dV
/// (FlashAttention-2's algorithm: P recomputed from q, k and the forward's lse).
#include <array>
#include <cstdint>
#include <optional>

#include "flashrtc/attention.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

struct BackwardParams {
  DType dtype = DType::kFloat32;  ///< of q, k, v, o, d_o and the gradients alike
  std::int64_t batch = 0;
  std::int64_t seqlen_q = 0, seqlen_kv = 0;
  std::int64_t heads_q = 0, heads_kv = 0;  ///< heads_q % heads_kv == 0 (GQA, MQA)
  std::int64_t head_dim = 0;               ///< a multiple of 8 up to 256
  TensorRef q, k, v;                       ///< the forward's inputs: q [B, Nq, Hq, d]; k, v [B, Nk, Hkv, d]
  TensorRef o;                             ///< the forward's output [B, Nq, Hq, d]
  TensorRef d_o;                           ///< gradient of the loss by o, [B, Nq, Hq, d]
  const float* lse = nullptr;  ///< required: the forward's lse, [B, Hq, Nq] float32, contiguous
  TensorRef d_q;               ///< written: [B, Nq, Hq, d]
  TensorRef d_k, d_v;          ///< written: [B, Nk, Hkv, d] (summed over the query heads of a group)
  std::optional<float> softmax_scale;  ///< the forward's; default 1/sqrt(head_dim)
  MaskKind mask = MaskKind::kNone;     ///< the forward's
  /// Same bits on every run: no floating-point atomics. Every call is deterministic today (the atomic-free dQ
  /// pass measured faster on Hopper); the flag keeps the promise should an atomic mode become the default.
  bool deterministic = false;
  void* stream = nullptr;  ///< CUstream / cudaStream_t; null is the legacy default stream
  std::optional<TileConfig> config;  ///< explicit tile for the main kernel; else tuned or default
  /// Explicit tile for the separate dQ pass (Operation::kBackwardDq); else tuned or default. The atomic
  /// mode's conversion takes none.
  std::optional<TileConfig> dq_config;
};

/// Validates params, compiles or fetches the backward kernels, and launches them on params.stream in the
/// current device's primary context. Asynchronous; any workspace comes from stream-ordered scratch.
/// Same input rules as attention_forward, for every tensor. Throws Error as attention_forward does;
/// kInvalidArgument naming the tensor for one whose shape or strides do not fit (nothing launched).
FLASHRTC_API void attention_backward(const BackwardParams& params);

/// The operations of the kernels attention_backward launches, in launch order: the pre-pass, the main kernel
/// and the dQ pass (the atomic-free pass over query blocks, or the conversion of the atomics' fp32 workspace
/// where a non-deterministic call takes the atomic mode). Each resolves its family and tile on its own.
FLASHRTC_API std::array<Operation, 3> backward_operations(bool deterministic);

/// The field of params holding the explicit tile of op's kernel: &config (kBackward), &dq_config
/// (kBackwardDq); null for the kernels that take none (the pre-pass, the atomic mode's conversion, the
/// forward).
FLASHRTC_API const std::optional<TileConfig>* explicit_tile(const BackwardParams& params, Operation op);
inline std::optional<TileConfig>* explicit_tile(BackwardParams& params, Operation op) {
  return const_cast<std::optional<TileConfig>*>(
      explicit_tile(static_cast<const BackwardParams&>(params), op));
}

/// Checks params as attention_backward does, without a device. Throws Error(kInvalidArgument).
FLASHRTC_API void validate_backward(const BackwardParams& params);

/// FLOPs by PERF.md's convention: 2.5 times the forward's (attention_flops).
FLASHRTC_API double attention_backward_flops(const BackwardParams& params);

}  // namespace flashrtc

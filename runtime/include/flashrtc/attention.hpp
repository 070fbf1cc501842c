#pragma once
/// Forward attention: o = softmax(scale * q k^T + mask) v, per batch and query head.
#include <cstdint>
#include <optional>

#include "flashrtc/export.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

/// A 4-d device tensor [batch, seq, head, dim] given by its pointer and element strides, so [B,N,H,d],
/// [B,H,N,d] and padded views are all described without copies.
struct TensorRef {
  const void* data = nullptr;
  std::int64_t stride_batch = 0, stride_seq = 0, stride_head = 0, stride_dim = 1;

  /// Contiguous [B, N, H, d].
  FLASHRTC_API static TensorRef bnhd(const void* data, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim);
  /// Contiguous [B, H, N, d] (PyTorch's SDPA layout).
  FLASHRTC_API static TensorRef bhnd(const void* data, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim);
};

struct ForwardParams {
  DType dtype = DType::kFloat32;  ///< of q, k, v and o alike
  std::int64_t batch = 0;
  std::int64_t seqlen_q = 0, seqlen_kv = 0;
  std::int64_t heads_q = 0, heads_kv = 0;  ///< heads_q % heads_kv == 0 (GQA, MQA)
  std::int64_t head_dim = 0;               ///< a multiple of 8 up to 256
  TensorRef q, k, v;                       ///< q [B, Nq, Hq, d]; k, v [B, Nk, Hkv, d]
  TensorRef o;                             ///< [B, Nq, Hq, d], written
  float* lse = nullptr;  ///< optional [B, Hq, Nq] float32, contiguous: natural-log sum of exp of scaled scores
  std::optional<float> softmax_scale;      ///< default 1/sqrt(head_dim)
  MaskKind mask = MaskKind::kNone;
  void* stream = nullptr;                  ///< CUstream / cudaStream_t; null is the legacy default stream
  std::optional<TileConfig> config;        ///< explicit tile; else FLASHRTC_CONFIG, tuned, default (config_resolution.hpp)
};

/// Validates params, compiles or fetches the specialization, and launches it on params.stream in the
/// current device's primary context (the CUDA runtime's and PyTorch's context). Asynchronous.
///
/// Needs: device pointers readable with 16-byte vectors: stride_dim == 1, every pointer 16-byte aligned,
/// other strides multiples of 16 bytes, all strides >= 0. Rows with no visible key get o = 0, lse = -inf.
/// Throws Error: kInvalidArgument naming the argument (nothing is launched, outputs untouched);
/// kUnsupported for an explicit config that cannot run; kNoDevice; kNvrtc; kDriver; kInvalidArgument or
/// kUnsupported naming FLASHRTC_CONFIG when that override is malformed or cannot run.
FLASHRTC_API void attention_forward(const ForwardParams& params);

/// Checks params as attention_forward does, without a device. Throws Error(kInvalidArgument).
FLASHRTC_API void validate_forward(const ForwardParams& params);

/// The specialization attention_forward would launch for params (validated): for the current device, or
/// for sm_80's shared memory when there is none.
FLASHRTC_API ForwardSpec select_forward_spec(const ForwardParams& params);

/// FLOPs by the usual convention: 4 * B * Hq * Nq * Nk * d, halved for a causal mask (PERF.md).
FLASHRTC_API double attention_flops(const ForwardParams& params);

}  // namespace flashrtc

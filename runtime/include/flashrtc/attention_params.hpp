#pragma once
/// The parameters of an attention call: its tensors, shapes and options, for the forward (ForwardParams) and
/// the backward (BackwardParams). Plain data; the entry points are in attention.hpp and
/// attention_backward.hpp.
#include <cstdint>
#include <optional>

#include "flashrtc/attention_variants.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/tile.hpp"
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
  AttentionVariants variants;  ///< window, softcap, ALiBi, sinks (attention_variants.hpp); default off
  void* stream = nullptr;                  ///< CUstream / cudaStream_t; null is the legacy default stream
  std::optional<TileConfig> config;        ///< explicit tile; else FLASHRTC_CONFIG, tuned, default (config_resolution.hpp)
};

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
  AttentionVariants variants;          ///< the forward's
  /// Written when variants.sinks is set (required then, null otherwise): [Hq] float32, the gradient of the
  /// loss by the sinks, summed over batch and rows.
  float* d_sinks = nullptr;
  /// true: same bits on every run: the main kernel (dK, dV) and an atomic-free dQ pass, no floating-point
  /// atomics. false: where a fused family serves the call (sm_90a, fp16/bf16, d 64/96/128, strides a TMA
  /// map describes) from 2048 keys (4096 causal), or with its tile as config, one kernel forms dK and dV and
  /// adds dQ into an fp32 workspace in no fixed order, so dQ may differ in its last bits from run to run;
  /// elsewhere the same kernels as true. backward_operations says which run.
  bool deterministic = false;
  void* stream = nullptr;  ///< CUstream / cudaStream_t; null is the legacy default stream
  /// Explicit tile for the main kernel (fused or not); else tuned or default. A tile the fused family does
  /// not take runs the separate pass (backward_operations).
  std::optional<TileConfig> config;
  /// Explicit tile for the separate dQ pass (Operation::kBackwardDq); else tuned or default. The fused
  /// kernel's conversion takes none.
  std::optional<TileConfig> dq_config;
};

}  // namespace flashrtc

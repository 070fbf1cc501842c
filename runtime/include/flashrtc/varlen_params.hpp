#pragma once
/// The parameters of a variable-length (packed) forward and backward call: B sequences of their own lengths
/// packed one after another along the token axis (docs/varlen.md). Plain data; the entry points are
/// attention_varlen_forward in attention.hpp and attention_varlen_backward in attention_backward.hpp.
/// Argument names follow FlashAttention's flash_attn_varlen_func.
#include <cstdint>
#include <optional>

#include "flashrtc/attention_params.hpp"
#include "flashrtc/attention_variants.hpp"
#include "flashrtc/tile.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

/// Tensors are TensorRefs over [total, heads, head_dim] (stride_seq steps one token, stride_head one head,
/// stride_dim == 1; stride_batch is not used: a packed tensor is one batch).
///
/// Values read from the device are data, not trusted: cu_seqlens_q[b] and [b + 1] are clamped to [0,
/// total_q] (and the end to at least the start), the same for the keys against total_k, seqused_k[b] to [0,
/// the sequence's keys]; a sequence's queries past max_seqlen_q are not computed. No value makes a kernel
/// read or write outside the tensors described here, and rows outside every sequence are never written.
struct VarlenForwardParams {
  DType dtype = DType::kFloat16;  ///< of q, k, v and o alike
  std::int64_t batch = 0;         ///< sequences B
  std::int64_t total_q = 0;       ///< rows of q and o (at least cu_seqlens_q[B])
  std::int64_t total_k = 0;       ///< rows of k and v (at least cu_seqlens_k[B]); 0 when no sequence has keys
  /// Host bounds of the sequences' lengths: the grid covers max_seqlen_q queries per sequence, and both pick
  /// the tile as a dense call's lengths do. 1 <= max_seqlen_q <= total_q, 0 <= max_seqlen_k <= total_k.
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  std::int64_t heads_q = 0, heads_kv = 0;  ///< heads_q % heads_kv == 0 (GQA, MQA)
  std::int64_t head_dim = 0;               ///< a multiple of 8 up to 256
  TensorRef q;                             ///< [total_q, Hq, d]
  TensorRef k, v;                          ///< [total_k, Hkv, d]
  TensorRef o;                             ///< [total_q, Hq, d], written for the rows of the sequences
  /// [B + 1] int32 on the device each, prefix sums: sequence b owns queries [cu_seqlens_q[b], cu_seqlens_q[b
  /// + 1]) and keys [cu_seqlens_k[b], cu_seqlens_k[b + 1]).
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;
  /// Optional [B] int32 on the device: sequence b attends only its first seqused_k[b] keys.
  const std::int32_t* seqused_k = nullptr;
  /// Optional [Hq, total_q] float32, contiguous (entry (h, t) at h * total_q + t): natural-log sum of exp of
  /// the scaled scores; -inf for a row with no visible key.
  float* lse = nullptr;
  std::optional<float> softmax_scale;  ///< default 1/sqrt(head_dim)
  /// Counted from each sequence's own start with its own lengths Lq, Lk: kCausalTopLeft j <= i,
  /// kCausalBottomRight j <= i + Lk - Lq. A row with no visible key gets o = 0, lse = -inf.
  MaskKind mask = MaskKind::kNone;
  /// Window, softcap, ALiBi, sinks (attention_variants.hpp), counted from each sequence's start with its own
  /// lengths; per-batch ALiBi slopes are per sequence. Default off.
  AttentionVariants variants;
  void* stream = nullptr;            ///< CUstream / cudaStream_t; null is the legacy default stream
  std::optional<TileConfig> config;  ///< explicit tile; else tuned, else default
};

/// The gradients of a varlen forward call: its fields (same rules), the forward's o and lse, the upstream
/// gradient d_o, and dQ, dK, dV written in the same packed layouts. Always deterministic (the same bits on
/// every run): a main kernel forms dK and dV per key block, a separate pass dQ per query block, no atomics.
///
/// Written: the d_q rows of each sequence's queries (up to max_seqlen_q of them; 0 for a query that sees no
/// key), and the d_k and d_v rows of every key each sequence owns (up to max_seqlen_k of them), 0 for keys no
/// query sees (past seqused_k, or of a sequence without queries). Rows outside every sequence are never
/// written.
struct VarlenBackwardParams {
  DType dtype = DType::kFloat16;  ///< of every tensor; fp16 or bf16 (the portable backward's)
  std::int64_t batch = 0;         ///< sequences B
  std::int64_t total_q = 0;       ///< rows of q, o, d_o and d_q (at least cu_seqlens_q[B])
  std::int64_t total_k = 0;       ///< rows of k, v, d_k and d_v (at least cu_seqlens_k[B])
  /// As the forward's: 1 <= max_seqlen_q <= total_q, 0 <= max_seqlen_k <= total_k, at least every sequence's
  /// lengths (the grids cover max_seqlen_q queries and max_seqlen_k keys of each sequence).
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  std::int64_t heads_q = 0, heads_kv = 0;  ///< heads_q % heads_kv == 0 (GQA, MQA)
  std::int64_t head_dim = 0;               ///< a multiple of 8 up to 256
  TensorRef q;                             ///< the forward's [total_q, Hq, d]
  TensorRef k, v;                          ///< the forward's [total_k, Hkv, d]
  TensorRef o;                             ///< the forward's output [total_q, Hq, d]
  TensorRef d_o;                           ///< gradient of the loss by o, [total_q, Hq, d]
  /// Required: the forward's lse, [Hq, total_q] float32, contiguous (entry (h, t) at h * total_q + t).
  const float* lse = nullptr;
  TensorRef d_q;       ///< written: [total_q, Hq, d]
  TensorRef d_k, d_v;  ///< written: [total_k, Hkv, d] (summed over the query heads of a group)
  /// As the forward's: device prefix sums [B + 1] and the optional seqused_k [B], int32, clamped as there.
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;
  const std::int32_t* seqused_k = nullptr;
  std::optional<float> softmax_scale;   ///< the forward's; default 1/sqrt(head_dim)
  MaskKind mask = MaskKind::kNone;      ///< the forward's, counted from each sequence's start
  AttentionVariants variants;           ///< the forward's
  /// Written when variants.sinks is set (required then, null otherwise): [Hq] float32, the gradient of the
  /// loss by the sinks, summed over sequences and rows.
  float* d_sinks = nullptr;
  void* stream = nullptr;               ///< CUstream / cudaStream_t; null is the legacy default stream
  std::optional<TileConfig> config;     ///< explicit tile for the main kernel (dK, dV); else tuned or default
  std::optional<TileConfig> dq_config;  ///< explicit tile for the dQ pass; else tuned or default
  /// As BackwardParams::deterministic, with max_seqlen_k for the key length: true, the main kernel and the
  /// atomic-free dQ pass; false, where the fused family serves the call, dQ added into an fp32 workspace in
  /// no fixed order (last bits may differ from run to run). varlen_backward_operations says which run.
  bool deterministic = false;
};

}  // namespace flashrtc

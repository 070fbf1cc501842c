#pragma once
/// The parameters of attention over a KV cache and of merge_states: plain data; the entry points are in
/// attention_kvcache.hpp.
#include <cstdint>
#include <optional>

#include "flashrtc/attention_params.hpp"
#include "flashrtc/attention_variants.hpp"
#include "flashrtc/tile.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

/// The parameters of attention_with_kvcache. Tensors are 4-d [outer, seq, head, dim] TensorRefs (element
/// strides, stride_dim == 1), as for attention_forward.
///
/// The cache is paged or contiguous, one code path:
///   paged (block_table set): k_cache, v_cache are [num_pages, page_size, Hkv, d]; stride_batch steps one page.
///     Token j of sequence b is row j % page_size of page block_table[b * block_table_stride + j / page_size].
///   contiguous (block_table null): [num_pages, page_size, Hkv, d] with one page per sequence: the rows of the
///     cache are its pages, page_size its length, and sequence b lives in page cache_batch_idx[b] (or b).
/// A sequence holds at most capacity() tokens.
///
/// Values read from the device are data, not trusted: cache_seqlens[b] is clamped to [0, capacity() -
/// seqlen_new]; a page id or cache_batch_idx outside [0, num_pages) holds nothing (its keys are hidden, an
/// append into it is dropped). No value makes a kernel read or write outside the tensors described here.
struct KvCacheParams {
  DType dtype = DType::kFloat16;  ///< of q, k_cache, v_cache, k_new, v_new and o alike
  std::int64_t batch = 0;         ///< sequences: the outer extent of q, o, k_new, cache_seqlens, block_table
  std::int64_t seqlen_q = 0;      ///< query tokens per sequence: 1 for decoding, a few for speculative decoding
  std::int64_t heads_q = 0, heads_kv = 0;  ///< heads_q % heads_kv == 0 (GQA, MQA)
  std::int64_t head_dim = 0;               ///< a multiple of 8 up to 256
  TensorRef q;                             ///< [B, Nq, Hq, d]
  TensorRef k_cache, v_cache;              ///< [num_pages, page_size, Hkv, d]; written where k_new is appended
  std::int64_t num_pages = 0;              ///< outer extent of k_cache and v_cache
  std::int64_t page_size = 0;  ///< tokens per page: paged, a power of two; contiguous, the cache's length
  /// [B, max_pages_per_seq] int32 on the device, row stride block_table_stride elements; null: contiguous.
  const std::int32_t* block_table = nullptr;
  std::int64_t block_table_stride = 0;
  std::int64_t max_pages_per_seq = 0;  ///< paged only: columns of block_table a sequence may use
  /// [B] int32 on the device: tokens in each sequence's cache before k_new is appended. Null: every sequence
  /// holds capacity() tokens (then k_new must be absent).
  const std::int32_t* cache_seqlens = nullptr;
  /// [B] int32 on the device, contiguous caches only: the cache page of sequence b. Null: page b.
  const std::int32_t* cache_batch_idx = nullptr;
  /// Optional new keys and values [B, seqlen_new, Hkv, d], written into the cache at positions
  /// cache_seqlens[b] .. + seqlen_new before attending (data null: nothing appended, seqlen_new 0).
  TensorRef k_new, v_new;
  std::int64_t seqlen_new = 0;
  TensorRef o;           ///< [B, Nq, Hq, d], written
  float* lse = nullptr;  ///< optional [B, Hq, Nq] float32, contiguous: natural log; -inf for a row with no key
  std::optional<float> softmax_scale;  ///< default 1/sqrt(head_dim)
  /// kNone, or kCausalBottomRight: query t of sequence b sees keys j <= t + L_b - Nq, where L_b is b's length
  /// after the append (FlashAttention's causal for a cache). kCausalTopLeft is refused: it has no meaning
  /// for queries that follow the cache.
  MaskKind mask = MaskKind::kNone;
  /// Window, softcap, ALiBi, sinks (attention_variants.hpp) with Nk = L_b, the sequence's length after the
  /// append (so diag = L_b - Nq). Default off.
  AttentionVariants variants;
  /// Key splits per (sequence, KV head): 0 chooses from the shapes and the SM count alone (never from device
  /// data, so a call captures into a CUDA graph and replays for any cache_seqlens); otherwise 1 to 256.
  int num_splits = 0;
  void* stream = nullptr;  ///< CUstream / cudaStream_t; null is the legacy default stream
  std::optional<TileConfig> config;  ///< explicit tile of the attention kernel; else tuned, else default

  /// Tokens a sequence can hold: page_size for a contiguous cache, max_pages_per_seq * page_size for a paged one.
  std::int64_t capacity() const { return block_table ? max_pages_per_seq * page_size : page_size; }
};

/// The parameters of merge_states: two attention results over disjoint key sets of the same queries.
struct MergeStatesParams {
  DType dtype = DType::kFloat16;  ///< of o_a, o_b and o
  std::int64_t batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  TensorRef o_a, o_b;  ///< [B, N, H, d]
  const float* lse_a = nullptr;  ///< [B, H, N] float32, contiguous, natural log (-inf: no key in the set)
  const float* lse_b = nullptr;
  TensorRef o;           ///< [B, N, H, d], written; may be o_a or o_b itself
  float* lse = nullptr;  ///< optional [B, H, N] float32, written; may be lse_a or lse_b itself
  void* stream = nullptr;
};

}  // namespace flashrtc

#pragma once
/// CPU reference of attention over a KV cache (attention_kvcache.hpp's semantics) and of merge_states, on host
/// data laid out as the device's. The attention itself is forward_head's (or its input-precision variant's),
/// run on each query row's gathered visible keys: one source of truth for the math.
#include <cstdint>
#include <optional>
#include <vector>

#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::reference {

/// Shapes, options and the host copy of the cache's addressing of one attention_with_kvcache call. The cache
/// is [num_pages, page_size, Hkv, d]: paged when block_table is set, else one page per sequence.
struct KvCacheProblem {
  std::int64_t batch = 1, seqlen_q = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  std::int64_t num_pages = 1, page_size = 1;
  std::int64_t max_pages_per_seq = 0;          ///< paged only: block_table's row length (its stride)
  std::vector<std::int32_t> block_table;       ///< [B, max_pages_per_seq]; empty: contiguous
  std::vector<std::int32_t> cache_batch_idx;   ///< [B], contiguous only; empty: sequence b in page b
  std::vector<std::int32_t> cache_seqlens;     ///< [B] before the append; empty: every sequence is full
  std::int64_t seqlen_new = 0;                 ///< tokens appended per sequence (k_new, v_new)
  MaskKind mask = MaskKind::kNone;             ///< kNone or kCausalBottomRight
  std::optional<double> scale;                 ///< unset: 1/sqrt(head_dim)

  bool paged() const { return !block_table.empty(); }
  std::int64_t capacity() const { return paged() ? max_pages_per_seq * page_size : page_size; }
  /// Tokens of sequence b before the append: cache_seqlens[b] clamped to [0, capacity() - seqlen_new].
  std::int64_t cached_length(std::int64_t b) const;
  /// Sequence b's attended length L_b: cached_length(b) + seqlen_new.
  std::int64_t length(std::int64_t b) const { return cached_length(b) + seqlen_new; }
  /// The page holding token j (< capacity()) of sequence b, or -1 where the table (or cache_batch_idx) names
  /// no page in [0, num_pages): such a page holds nothing.
  std::int64_t page_of(std::int64_t b, std::int64_t j) const;
  /// The forward Problem of one query row over n keys (mask none: the row's visible keys are gathered).
  Problem row_problem(std::int64_t n) const;
};

/// Writes k_new/v_new [B, seqlen_new, Hkv, d] into the host cache at rows cached_length(b) .. + seqlen_new of
/// each sequence; a token whose page is -1 is dropped. Touches no other row.
/// Throws std::invalid_argument on invalid shapes (as validate_kvcache, for the host-checkable rules).
void kvcache_append(const KvCacheProblem& p, const HostTensor<const double>& k_new,
                    const HostTensor<const double>& v_new, const HostTensor<double>& k_cache,
                    const HostTensor<double>& v_cache);

/// attention_with_kvcache on host data, one sequence: query t of sequence b attends the keys j < L_b whose page
/// is not -1 and, under kCausalBottomRight, j <= t + L_b - seqlen_q. o [B, Nq, Hq, d]; lse [B, Hq, Nq]
/// contiguous (nullable). A row with no visible key gets o = 0, lse = -inf. input_precision: the kernel's
/// input-precision computation in that dtype (forward_head_input_precision), else the double reference.
/// The cache must already hold the appended tokens (kvcache_append). Distinct b may run concurrently.
void attention_with_kvcache_sequence(const KvCacheProblem& p, std::int64_t b, const HostTensor<const double>& q,
                                     const HostTensor<const double>& k_cache,
                                     const HostTensor<const double>& v_cache, const HostTensor<double>& o,
                                     double* lse, std::optional<DType> input_precision = std::nullopt);

/// The whole call: appends k_new/v_new (both null: nothing; then seqlen_new must be 0) into the host cache
/// k_cache/v_cache in place, so that a test compares the device's cache with it, then attends every sequence.
void attention_with_kvcache(const KvCacheProblem& p, const HostTensor<const double>& q,
                            const HostTensor<double>& k_cache, const HostTensor<double>& v_cache,
                            const HostTensor<const double>* k_new, const HostTensor<const double>* v_new,
                            const HostTensor<double>& o, double* lse,
                            std::optional<DType> input_precision = std::nullopt);

/// merge_states: lse = log(exp(lse_a) + exp(lse_b)), o = e^(lse_a - lse) o_a + e^(lse_b - lse) o_b; both -inf:
/// o = 0, lse = -inf. o_* are [B, N, H, d], lse_* [B, H, N] contiguous; o may be o_a or o_b and lse lse_a or
/// lse_b (nullable). round_output: o rounded to that dtype (the kernel's output, for the tolerance budget).
void merge_states(std::int64_t batch, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim,
                  const HostTensor<const double>& o_a, const double* lse_a, const HostTensor<const double>& o_b,
                  const double* lse_b, const HostTensor<double>& o, double* lse,
                  std::optional<DType> round_output = std::nullopt);

}  // namespace flashrtc::reference

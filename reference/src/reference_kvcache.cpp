// Attention over a KV cache on host data: each query row's visible keys are gathered from the pages and handed
// to the forward reference (mask none), so the cache reference shares forward_head's math.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashrtc_reference/kvcache_reference.hpp"

namespace flashrtc::reference {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check(const KvCacheProblem& p) {
  if (p.batch < 1 || p.seqlen_q < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.head_dim < 1 || p.num_pages < 1 ||
      p.page_size < 1 || p.seqlen_new < 0)
    throw std::invalid_argument("reference: every extent of a KV-cache problem must be at least 1");
  if (p.heads_q % p.heads_kv != 0)
    throw std::invalid_argument("reference: heads_q must be a multiple of heads_kv");
  if (p.mask == MaskKind::kCausalTopLeft)
    throw std::invalid_argument("reference: a KV cache's causal mask is bottom-right");
  if (p.paged()) {
    if (p.max_pages_per_seq < 1 || static_cast<std::int64_t>(p.block_table.size()) != p.batch * p.max_pages_per_seq)
      throw std::invalid_argument("reference: block_table must hold batch * max_pages_per_seq entries");
    if (!p.cache_batch_idx.empty())
      throw std::invalid_argument("reference: cache_batch_idx is for a contiguous cache only");
  } else if (!p.cache_batch_idx.empty() && static_cast<std::int64_t>(p.cache_batch_idx.size()) != p.batch) {
    throw std::invalid_argument("reference: cache_batch_idx must hold batch entries");
  }
  if (!p.cache_seqlens.empty() && static_cast<std::int64_t>(p.cache_seqlens.size()) != p.batch)
    throw std::invalid_argument("reference: cache_seqlens must hold batch entries");
  if (p.cache_seqlens.empty() && p.seqlen_new != 0)
    throw std::invalid_argument("reference: an append needs cache_seqlens");
  if (p.seqlen_new > p.capacity())
    throw std::invalid_argument("reference: seqlen_new exceeds the capacity");
}

}  // namespace

std::int64_t KvCacheProblem::cached_length(std::int64_t b) const {
  if (cache_seqlens.empty()) return capacity();
  const std::int64_t n = cache_seqlens.at(static_cast<std::size_t>(b)), most = capacity() - seqlen_new;
  return n < 0 ? 0 : std::min(n, most);
}

std::int64_t KvCacheProblem::page_of(std::int64_t b, std::int64_t j) const {
  std::int64_t page;
  if (paged())
    page = block_table.at(static_cast<std::size_t>(b * max_pages_per_seq + j / page_size));
  else
    page = cache_batch_idx.empty() ? b : cache_batch_idx.at(static_cast<std::size_t>(b));
  return page >= 0 && page < num_pages ? page : -1;
}

Problem KvCacheProblem::row_problem(std::int64_t n) const {
  Problem r;
  r.batch = 1;
  r.seqlen_q = 1;
  r.seqlen_kv = n;
  r.heads_q = heads_q;
  r.heads_kv = heads_kv;
  r.head_dim = head_dim;
  r.mask = MaskKind::kNone;
  r.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  return r;
}

void kvcache_append(const KvCacheProblem& p, const HostTensor<const double>& k_new,
                    const HostTensor<const double>& v_new, const HostTensor<double>& k_cache,
                    const HostTensor<double>& v_cache) {
  check(p);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t start = p.cached_length(b);
    for (std::int64_t t = 0; t < p.seqlen_new; ++t) {
      const std::int64_t j = start + t;
      const std::int64_t page = p.page_of(b, j);
      if (page < 0) continue;  // a page outside the cache holds nothing
      const std::int64_t row = j % p.page_size;
      for (std::int64_t h = 0; h < p.heads_kv; ++h)
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          k_cache.at(page, row, h, d) = k_new.at(b, t, h, d);
          v_cache.at(page, row, h, d) = v_new.at(b, t, h, d);
        }
    }
  }
}

void attention_with_kvcache_sequence(const KvCacheProblem& p, std::int64_t b, const HostTensor<const double>& q,
                                     const HostTensor<const double>& k_cache,
                                     const HostTensor<const double>& v_cache, const HostTensor<double>& o,
                                     double* lse, std::optional<DType> input_precision) {
  check(p);
  if (b < 0 || b >= p.batch) throw std::invalid_argument("reference: batch index out of range");
  const std::int64_t length = p.length(b);
  // The keys of sequence b that a page holds, in token order, dense [1, n, Hkv, d]; positions[i] is key i's
  // token index. A causal row sees a prefix of them.
  std::vector<std::int64_t> positions;
  std::vector<double> keys, values;
  const std::int64_t row_elems = p.heads_kv * p.head_dim;
  for (std::int64_t j = 0; j < length; ++j) {
    const std::int64_t page = p.page_of(b, j);
    if (page < 0) continue;
    positions.push_back(j);
    for (std::int64_t h = 0; h < p.heads_kv; ++h)
      for (std::int64_t d = 0; d < p.head_dim; ++d) {
        keys.push_back(k_cache.at(page, j % p.page_size, h, d));
        values.push_back(v_cache.at(page, j % p.page_size, h, d));
      }
  }
  const HostTensor<const double> k_dense{keys.data(), 0, row_elems, p.head_dim, 1};
  const HostTensor<const double> v_dense{values.data(), 0, row_elems, p.head_dim, 1};
  std::vector<double> row_lse(static_cast<std::size_t>(p.heads_q));
  for (std::int64_t t = 0; t < p.seqlen_q; ++t) {
    std::int64_t visible = static_cast<std::int64_t>(positions.size());
    if (p.mask == MaskKind::kCausalBottomRight) {
      const std::int64_t last = t + length - p.seqlen_q;
      visible = std::upper_bound(positions.begin(), positions.end(), last) - positions.begin();
    }
    double* lse_out = lse ? lse + (b * p.heads_q) * p.seqlen_q + t : nullptr;
    if (visible == 0) {
      for (std::int64_t h = 0; h < p.heads_q; ++h) {
        for (std::int64_t d = 0; d < p.head_dim; ++d) o.at(b, t, h, d) = 0;
        if (lse_out) lse_out[h * p.seqlen_q] = kNegInf;
      }
      continue;
    }
    // Row t of sequence b as a batch of one query token.
    const HostTensor<const double> q_row{&q.at(b, t, 0, 0), 0, 0, q.stride_head, q.stride_dim};
    const HostTensor<double> o_row{&o.at(b, t, 0, 0), 0, 0, o.stride_head, o.stride_dim};
    const Problem row = p.row_problem(visible);
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      if (input_precision)
        forward_head_input_precision(row, *input_precision, 0, h, q_row, k_dense, v_dense, o_row, row_lse.data());
      else
        forward_head(row, 0, h, q_row, k_dense, v_dense, o_row, row_lse.data());
      if (lse_out) lse_out[h * p.seqlen_q] = row_lse[static_cast<std::size_t>(h)];
    }
  }
}

void attention_with_kvcache(const KvCacheProblem& p, const HostTensor<const double>& q,
                            const HostTensor<double>& k_cache, const HostTensor<double>& v_cache,
                            const HostTensor<const double>* k_new, const HostTensor<const double>* v_new,
                            const HostTensor<double>& o, double* lse, std::optional<DType> input_precision) {
  check(p);
  if ((k_new == nullptr) != (v_new == nullptr))
    throw std::invalid_argument("reference: k_new and v_new come together");
  if (k_new) {
    kvcache_append(p, *k_new, *v_new, k_cache, v_cache);
  } else if (p.seqlen_new != 0) {
    throw std::invalid_argument("reference: seqlen_new must be 0 without k_new and v_new");
  }
  const HostTensor<const double> k{k_cache.data, k_cache.stride_batch, k_cache.stride_seq, k_cache.stride_head,
                                   k_cache.stride_dim};
  const HostTensor<const double> v{v_cache.data, v_cache.stride_batch, v_cache.stride_seq, v_cache.stride_head,
                                   v_cache.stride_dim};
  for (std::int64_t b = 0; b < p.batch; ++b)
    attention_with_kvcache_sequence(p, b, q, k, v, o, lse, input_precision);
}

void merge_states(std::int64_t batch, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim,
                  const HostTensor<const double>& o_a, const double* lse_a, const HostTensor<const double>& o_b,
                  const double* lse_b, const HostTensor<double>& o, double* lse, std::optional<DType> round_output) {
  if (batch < 1 || seqlen < 1 || heads < 1 || head_dim < 1)
    throw std::invalid_argument("reference: every extent of merge_states must be at least 1");
  if (!lse_a || !lse_b) throw std::invalid_argument("reference: merge_states needs lse_a and lse_b");
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t n = 0; n < seqlen; ++n) {
        const std::int64_t i = (b * heads + h) * seqlen + n;
        const double a = lse_a[i], c = lse_b[i];
        const double top = std::max(a, c);
        double merged = kNegInf, wa = 0, wb = 0;
        if (top != kNegInf) {  // both -inf: exp(-inf - -inf) would be NaN
          merged = top + std::log(std::exp(a - top) + std::exp(c - top));
          wa = std::exp(a - merged);
          wb = std::exp(c - merged);
        }
        for (std::int64_t d = 0; d < head_dim; ++d) {
          // A side with weight 0 contributes nothing, whatever its o holds.
          const double x = (wa != 0 ? wa * o_a.at(b, n, h, d) : 0.0) + (wb != 0 ? wb * o_b.at(b, n, h, d) : 0.0);
          o.at(b, n, h, d) = round_output ? round_to(*round_output, x) : x;
        }
        if (lse) lse[i] = merged;
      }
}

}  // namespace flashrtc::reference

#pragma once
// Host-side KV caches for the reference and gpu suites: a sequence's logical tokens laid out in a paged cache
// with a shuffled block table, or in a contiguous one with permuted cache_batch_idx, rows no sequence owns
// left at a poison value.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "flashrtc_reference/kvcache_reference.hpp"

namespace flashrtc::testing {

/// Sequence b's tokens 0 .. capacity-1, [B, capacity, Hkv, d] dense.
struct LogicalKv {
  std::int64_t batch = 1, capacity = 1, heads_kv = 1, head_dim = 8;
  std::vector<double> k, v;
  LogicalKv(std::int64_t b, std::int64_t cap, std::int64_t hkv, std::int64_t d)
      : batch(b), capacity(cap), heads_kv(hkv), head_dim(d),
        k(static_cast<std::size_t>(b * cap * hkv * d)), v(k.size()) {}
  std::size_t index(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>(((b * capacity + j) * heads_kv + h) * head_dim + d);
  }
};

/// A [num_pages, page_size, Hkv, d] cache, dense, every row at `fill` until written.
struct HostCache {
  std::int64_t num_pages = 1, page_size = 1, heads_kv = 1, head_dim = 8;
  std::vector<double> k, v;
  HostCache(const reference::KvCacheProblem& p, double fill = std::numeric_limits<double>::quiet_NaN())
      : num_pages(p.num_pages), page_size(p.page_size), heads_kv(p.heads_kv), head_dim(p.head_dim),
        k(static_cast<std::size_t>(p.num_pages * p.page_size * p.heads_kv * p.head_dim), fill), v(k.size(), fill) {}
  std::int64_t stride_page() const { return page_size * heads_kv * head_dim; }
  reference::HostTensor<double> k_view() { return {k.data(), stride_page(), heads_kv * head_dim, head_dim, 1}; }
  reference::HostTensor<double> v_view() { return {v.data(), stride_page(), heads_kv * head_dim, head_dim, 1}; }
  reference::HostTensor<const double> k_cview() const { return {k.data(), stride_page(), heads_kv * head_dim, head_dim, 1}; }
  reference::HostTensor<const double> v_cview() const { return {v.data(), stride_page(), heads_kv * head_dim, head_dim, 1}; }
};

/// Makes p paged: pages_per_seq pages per sequence of page_size tokens, num_pages = B * pages_per_seq +
/// spare_pages, each sequence's pages drawn from a random permutation of all pages.
inline void make_paged(reference::KvCacheProblem& p, std::int64_t page_size, std::int64_t pages_per_seq,
                       std::int64_t spare_pages, std::mt19937_64& rng) {
  p.page_size = page_size;
  p.max_pages_per_seq = pages_per_seq;
  p.num_pages = p.batch * pages_per_seq + spare_pages;
  std::vector<std::int32_t> pages(static_cast<std::size_t>(p.num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  p.block_table.assign(pages.begin(), pages.begin() + p.batch * pages_per_seq);
  p.cache_batch_idx.clear();
}

/// Makes p contiguous: one page of `capacity` tokens per sequence, num_pages = B + spare_pages, sequence b in
/// page cache_batch_idx[b], a random permutation.
inline void make_contiguous(reference::KvCacheProblem& p, std::int64_t capacity, std::int64_t spare_pages,
                            std::mt19937_64& rng) {
  p.page_size = capacity;
  p.max_pages_per_seq = 0;
  p.block_table.clear();
  p.num_pages = p.batch + spare_pages;
  std::vector<std::int32_t> pages(static_cast<std::size_t>(p.num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  p.cache_batch_idx.assign(pages.begin(), pages.begin() + p.batch);
}

/// Writes tokens [0, count(b)) of each sequence from logical into the cache where p addresses them.
template <typename Count>
void scatter(const reference::KvCacheProblem& p, const LogicalKv& logical, HostCache& cache, Count count) {
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t j = 0; j < count(b); ++j) {
      const std::int64_t page = p.page_of(b, j);
      if (page < 0) continue;
      for (std::int64_t h = 0; h < p.heads_kv; ++h)
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          const std::size_t at = static_cast<std::size_t>(((page * p.page_size + j % p.page_size) * p.heads_kv + h) *
                                                              p.head_dim + d);
          cache.k[at] = logical.k[logical.index(b, j, h, d)];
          cache.v[at] = logical.v[logical.index(b, j, h, d)];
        }
    }
}

}  // namespace flashrtc::testing

// The KV-cache reference (kvcache_reference.hpp): its addressing against the plain forward reference, paged
// against contiguous on the same logical data, merge_states against attention over the union, empty rows,
// clamped lengths and pages outside the cache.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashrtc_reference/kvcache_reference.hpp"
#include "support/kvcache_layout.hpp"
#include "support/reference_problem.hpp"

using namespace flashrtc;
using flashrtc::reference::HostTensor;
using flashrtc::reference::KvCacheProblem;
using flashrtc::testing::HostCache;
using flashrtc::testing::LogicalKv;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Two exact-arithmetic-equivalent double computations differ only by summation order.
constexpr double kSameMathTolerance = 1e-13;

void fill_normal(std::vector<double>& values, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double& x : values) x = normal(rng);
}

KvCacheProblem base_problem(std::int64_t batch, std::int64_t seqlen_q, std::int64_t heads_q, std::int64_t heads_kv,
                            std::int64_t head_dim, MaskKind mask) {
  KvCacheProblem p;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.mask = mask;
  return p;
}

// q [B, Nq, Hq, d] dense.
struct Queries {
  std::vector<double> values;
  std::int64_t seqlen, heads, head_dim;
  Queries(const KvCacheProblem& p, std::mt19937_64& rng)
      : values(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads_q * p.head_dim)),
        seqlen(p.seqlen_q), heads(p.heads_q), head_dim(p.head_dim) {
    fill_normal(values, rng);
  }
  HostTensor<const double> view() const {
    return HostTensor<const double>::bnhd(values.data(), seqlen, heads, head_dim);
  }
};

// o [B, Nq, Hq, d] and lse [B, Hq, Nq], NaN until written.
struct Result {
  std::vector<double> o, lse;
  explicit Result(const KvCacheProblem& p)
      : o(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads_q * p.head_dim),
          std::numeric_limits<double>::quiet_NaN()),
        lse(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q), std::numeric_limits<double>::quiet_NaN()) {}
  HostTensor<double> o_view(const KvCacheProblem& p) {
    return HostTensor<double>::bnhd(o.data(), p.seqlen_q, p.heads_q, p.head_dim);
  }
  HostTensor<const double> o_cview(const KvCacheProblem& p) const {
    return HostTensor<const double>::bnhd(o.data(), p.seqlen_q, p.heads_q, p.head_dim);
  }
};

Result run(const KvCacheProblem& p, const Queries& q, HostCache& cache, const std::vector<double>* k_new = nullptr,
           const std::vector<double>* v_new = nullptr) {
  Result r(p);
  const auto kn = k_new ? HostTensor<const double>::bnhd(k_new->data(), p.seqlen_new, p.heads_kv, p.head_dim)
                        : HostTensor<const double>{};
  const auto vn = v_new ? HostTensor<const double>::bnhd(v_new->data(), p.seqlen_new, p.heads_kv, p.head_dim)
                        : HostTensor<const double>{};
  reference::attention_with_kvcache(p, q.view(), cache.k_view(), cache.v_view(), k_new ? &kn : nullptr,
                                    v_new ? &vn : nullptr, r.o_view(p), r.lse.data());
  return r;
}

// The logical tokens [0, L_b) of each sequence read back out of a cache.
std::vector<double> gather(const KvCacheProblem& p, const HostCache& cache, bool values) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t j = 0; j < p.length(b); ++j) {
      const std::int64_t page = p.page_of(b, j);
      for (std::int64_t h = 0; h < p.heads_kv; ++h)
        for (std::int64_t d = 0; d < p.head_dim; ++d)
          out.push_back(page < 0 ? 0.0 : (values ? cache.v_cview() : cache.k_cview()).at(page, j % p.page_size, h, d));
    }
  return out;
}

}  // namespace

TEST_CASE("a full contiguous cache gives the forward reference with the bottom-right mask") {
  // Same length for every sequence: the forward over [B, L, Hkv, d] with causal-br is the same problem.
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight})
    for (std::int64_t nq : {1, 3, 9}) {
      std::mt19937_64 rng(static_cast<std::uint64_t>(nq) * 3 + static_cast<int>(mask));
      KvCacheProblem p = base_problem(2, nq, 8, 2, 16, mask);
      p.num_pages = 2;
      p.page_size = 7;  // Nq = 9 > L = 7: the first two rows see no key under causal-br
      const Queries q(p, rng);
      HostCache cache(p);
      fill_normal(cache.k, rng);
      fill_normal(cache.v, rng);
      const Result got = run(p, q, cache);

      const reference::Problem fp = testing::make_reference_problem(2, 8, 2, nq, 7, 16, mask);
      testing::Outputs expected(fp);
      reference::forward(fp, q.view(), cache.k_cview(), cache.v_cview(), expected.o.view(), expected.lse.data());
      INFO("mask=" << std::string(testing::mask_name(mask)) << " Nq=" << nq);
      CHECK(testing::max_relative_difference(got.o, expected.o.values) <= kSameMathTolerance);
      CHECK(testing::max_relative_difference(got.lse, expected.lse) <= kSameMathTolerance);
    }
}

TEST_CASE("paged equals contiguous on the same logical data: shuffled table, permuted pages, an append") {
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight})
    for (std::int64_t page_size : {1, 4, 16}) {
      std::mt19937_64 rng(static_cast<std::uint64_t>(page_size) * 11 + static_cast<int>(mask));
      KvCacheProblem p = base_problem(4, 3, 4, 1, 8, mask);
      const std::int64_t pages_per_seq = 48 / page_size;
      const std::int64_t capacity = pages_per_seq * page_size;
      p.cache_seqlens = {0, 1, 20, static_cast<std::int32_t>(capacity - 5)};  // ragged, empty, one, full after
      p.seqlen_new = 5;
      p.num_pages = p.batch;
      p.page_size = capacity;
      LogicalKv logical(p.batch, capacity, p.heads_kv, p.head_dim);
      fill_normal(logical.k, rng);
      fill_normal(logical.v, rng);
      std::vector<double> k_new(static_cast<std::size_t>(p.batch * p.seqlen_new * p.heads_kv * p.head_dim)),
          v_new(k_new.size());
      fill_normal(k_new, rng);
      fill_normal(v_new, rng);
      const Queries q(p, rng);
      const auto cached = [&](std::int64_t b) { return p.cached_length(b); };

      KvCacheProblem paged = p;
      testing::make_paged(paged, page_size, pages_per_seq, 3, rng);
      HostCache paged_cache(paged);
      testing::scatter(paged, logical, paged_cache, cached);
      KvCacheProblem contiguous = p;
      testing::make_contiguous(contiguous, capacity, 2, rng);
      HostCache contiguous_cache(contiguous);
      testing::scatter(contiguous, logical, contiguous_cache, cached);

      const Result a = run(paged, q, paged_cache, &k_new, &v_new);
      const Result b = run(contiguous, q, contiguous_cache, &k_new, &v_new);
      INFO("mask=" << std::string(testing::mask_name(mask)) << " page_size=" << page_size);
      // The same keys in the same order reach the same forward code: the same bits.
      CHECK(a.o == b.o);
      CHECK(testing::max_relative_difference(a.lse, b.lse) == 0);
      CHECK(gather(paged, paged_cache, false) == gather(contiguous, contiguous_cache, false));
      CHECK(gather(paged, paged_cache, true) == gather(contiguous, contiguous_cache, true));
      // Nothing is NaN: every row attended was written (cache rows) and every output written.
      for (double x : a.o) REQUIRE(std::isfinite(x));
    }
}

TEST_CASE("the append writes exactly rows cache_seqlens[b] .. + seqlen_new, dropping those of hidden pages") {
  std::mt19937_64 rng(5);
  KvCacheProblem p = base_problem(3, 1, 2, 2, 8, MaskKind::kNone);
  testing::make_paged(p, 4, 4, 2, rng);
  p.block_table[2 * 4 + 1] = -1;                         // sequence 2's tokens 4..7 have no page
  p.block_table[1 * 4 + 3] = static_cast<std::int32_t>(p.num_pages);  // nor sequence 1's tokens 12..15
  p.cache_seqlens = {2, 10, 3};
  p.seqlen_new = 3;  // rows 2..4 (across a page boundary), 10..12, 3..5
  HostCache cache(p, 7.0);
  const HostCache before = cache;
  std::vector<double> k_new(static_cast<std::size_t>(p.batch * p.seqlen_new * p.heads_kv * p.head_dim)), v_new(k_new.size());
  fill_normal(k_new, rng);
  fill_normal(v_new, rng);
  const auto kn = HostTensor<const double>::bnhd(k_new.data(), p.seqlen_new, p.heads_kv, p.head_dim);
  const auto vn = HostTensor<const double>::bnhd(v_new.data(), p.seqlen_new, p.heads_kv, p.head_dim);
  reference::kvcache_append(p, kn, vn, cache.k_view(), cache.v_view());

  std::vector<bool> written(cache.k.size(), false);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t t = 0; t < p.seqlen_new; ++t) {
      const std::int64_t j = p.cache_seqlens[static_cast<std::size_t>(b)] + t;
      const std::int64_t page = p.page_of(b, j);
      if (page < 0) continue;
      for (std::int64_t h = 0; h < p.heads_kv; ++h)
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          const auto at = static_cast<std::size_t>(((page * p.page_size + j % p.page_size) * p.heads_kv + h) * p.head_dim + d);
          written[at] = true;
          CHECK(cache.k[at] == kn.at(b, t, h, d));
          CHECK(cache.v[at] == vn.at(b, t, h, d));
        }
    }
  std::size_t untouched = 0, count_written = 0;
  for (std::size_t i = 0; i < written.size(); ++i) {
    if (written[i]) {
      ++count_written;
      continue;
    }
    untouched += cache.k[i] == before.k[i] && cache.v[i] == before.v[i];
  }
  // Sequence 1 loses token 12 (hidden page), sequence 2 tokens 4 and 5: 9 - 3 tokens written.
  CHECK(count_written == static_cast<std::size_t>(6 * p.heads_kv * p.head_dim));
  CHECK(untouched == written.size() - count_written);
}

TEST_CASE("empty rows: no cached token, every page hidden, causal rows before the first key") {
  std::mt19937_64 rng(9);
  KvCacheProblem p = base_problem(3, 4, 2, 1, 8, MaskKind::kCausalBottomRight);
  testing::make_paged(p, 2, 4, 0, rng);
  p.cache_seqlens = {0, 5, 2};
  for (int c = 0; c < 4; ++c) p.block_table[static_cast<std::size_t>(4 + c)] = -7;  // sequence 1: no page at all
  const Queries q(p, rng);
  HostCache cache(p);
  fill_normal(cache.k, rng);
  fill_normal(cache.v, rng);
  const Result r = run(p, q, cache);
  const auto row_empty = [&](std::int64_t b, std::int64_t t) {
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      if (r.lse[static_cast<std::size_t>((b * p.heads_q + h) * p.seqlen_q + t)] != kNegInf) return false;
      for (std::int64_t d = 0; d < p.head_dim; ++d)
        if (r.o_cview(p).at(b, t, h, d) != 0.0) return false;
    }
    return true;
  };
  for (std::int64_t t = 0; t < 4; ++t) {
    CHECK(row_empty(0, t));  // L = 0
    CHECK(row_empty(1, t));  // every key hidden
  }
  // L = 2, Nq = 4: query t sees keys j <= t - 2, so rows 0 and 1 are empty and rows 2, 3 are not.
  CHECK(row_empty(2, 0));
  CHECK(row_empty(2, 1));
  CHECK_FALSE(row_empty(2, 2));
  CHECK(std::isfinite(r.lse[static_cast<std::size_t>((2 * p.heads_q) * p.seqlen_q + 3)]));
}

TEST_CASE("cache_seqlens are clamped to [0, capacity - seqlen_new]; hidden keys are left out, not zeroed") {
  std::mt19937_64 rng(13);
  KvCacheProblem p = base_problem(3, 2, 4, 2, 16, MaskKind::kCausalBottomRight);
  testing::make_paged(p, 8, 3, 1, rng);
  p.seqlen_new = 2;
  const Queries q(p, rng);
  HostCache cache(p);
  fill_normal(cache.k, rng);
  fill_normal(cache.v, rng);
  std::vector<double> k_new(static_cast<std::size_t>(p.batch * p.seqlen_new * p.heads_kv * p.head_dim)), v_new(k_new.size());
  fill_normal(k_new, rng);
  fill_normal(v_new, rng);

  KvCacheProblem hostile = p, clamped = p;
  hostile.cache_seqlens = {-5, 1000, std::numeric_limits<std::int32_t>::max()};
  clamped.cache_seqlens = {0, 22, 22};  // capacity 24 - seqlen_new 2
  CHECK(hostile.cached_length(0) == 0);
  CHECK(hostile.cached_length(1) == 22);
  CHECK(hostile.length(2) == 24);
  HostCache hostile_cache = cache, clamped_cache = cache;
  const Result a = run(hostile, q, hostile_cache, &k_new, &v_new);
  const Result b = run(clamped, q, clamped_cache, &k_new, &v_new);
  CHECK(a.o == b.o);
  CHECK(testing::max_relative_difference(a.lse, b.lse) == 0);
  CHECK(hostile_cache.k == clamped_cache.k);

  // A hidden page removes its keys from the softmax: the same as a cache without those tokens' rows.
  KvCacheProblem hidden = p;
  hidden.seqlen_new = 0;
  hidden.mask = MaskKind::kNone;
  hidden.cache_seqlens = {24, 24, 24};
  hidden.block_table[1] = -1;  // sequence 0, tokens 8..15
  HostCache hidden_cache = cache;
  const Result with_hole = run(hidden, q, hidden_cache);
  // Sequence 0's keys 0..7 and 16..23 moved into a contiguous cache of 16 tokens.
  KvCacheProblem packed = base_problem(1, 2, 4, 2, 16, MaskKind::kNone);
  packed.num_pages = 1;
  packed.page_size = 16;
  HostCache packed_cache(packed);
  for (std::int64_t j = 0; j < 16; ++j) {
    const std::int64_t source = j < 8 ? j : j + 8;
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t d = 0; d < 16; ++d) {
        const std::int64_t page = hidden.page_of(0, source);
        packed_cache.k_view().at(0, j, h, d) = cache.k_cview().at(page, source % 8, h, d);
        packed_cache.v_view().at(0, j, h, d) = cache.v_cview().at(page, source % 8, h, d);
      }
  }
  Queries q0(packed, rng);
  std::copy(q.values.begin(), q.values.begin() + static_cast<std::ptrdiff_t>(q0.values.size()), q0.values.begin());
  const Result expected = run(packed, q0, packed_cache);
  for (std::size_t i = 0; i < expected.o.size(); ++i) CHECK(with_hole.o[i] == expected.o[i]);
  for (std::int64_t h = 0; h < 4; ++h)
    for (std::int64_t t = 0; t < 2; ++t)
      CHECK(with_hole.lse[static_cast<std::size_t>(h * 2 + t)] == expected.lse[static_cast<std::size_t>(h * 2 + t)]);
}

TEST_CASE("merge_states of attention over two disjoint halves equals attention over the union") {
  for (std::int64_t nq : {1, 3}) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(nq) * 101);
    KvCacheProblem all = base_problem(3, nq, 8, 2, 32, MaskKind::kNone);
    all.num_pages = 3;
    all.page_size = 40;
    all.cache_seqlens = {40, 13, 1};  // sequence 2: one key, all on side a; side b is empty there
    HostCache cache(all);
    fill_normal(cache.k, rng);
    fill_normal(cache.v, rng);
    const Queries q(all, rng);
    // Side a: each sequence's first half (rounded up); side b the rest, moved to the start of its own cache.
    KvCacheProblem side_a = all, side_b = all;
    HostCache cache_b = cache;
    for (std::int64_t b = 0; b < 3; ++b) {
      const std::int64_t len = all.cache_seqlens[static_cast<std::size_t>(b)], half = (len + 1) / 2;
      side_a.cache_seqlens[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(half);
      side_b.cache_seqlens[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(len - half);
      for (std::int64_t j = half; j < len; ++j)
        for (std::int64_t h = 0; h < 2; ++h)
          for (std::int64_t d = 0; d < 32; ++d) {
            cache_b.k_view().at(b, j - half, h, d) = cache.k_cview().at(b, j, h, d);
            cache_b.v_view().at(b, j - half, h, d) = cache.v_cview().at(b, j, h, d);
          }
    }
    HostCache cache_a = cache;
    const Result a = run(side_a, q, cache_a), b = run(side_b, q, cache_b), u = run(all, q, cache);
    Result merged(all);
    reference::merge_states(3, nq, 8, 32, a.o_cview(all), a.lse.data(), b.o_cview(all), b.lse.data(),
                            merged.o_view(all), merged.lse.data());
    INFO("Nq=" << nq);
    CHECK(testing::max_relative_difference(merged.o, u.o) <= kSameMathTolerance);
    CHECK(testing::max_relative_difference(merged.lse, u.lse) <= kSameMathTolerance);
    // In place: o and lse are side a's own arrays.
    Result in_place = a;
    reference::merge_states(3, nq, 8, 32, in_place.o_cview(all), in_place.lse.data(), b.o_cview(all), b.lse.data(),
                            in_place.o_view(all), in_place.lse.data());
    CHECK(in_place.o == merged.o);
    CHECK(testing::max_relative_difference(in_place.lse, merged.lse) == 0);
  }
}

TEST_CASE("merge_states of two empty rows is o = 0, lse = -inf; an empty side contributes nothing") {
  const std::int64_t d = 8;
  std::vector<double> o_a(2 * d, 1.5), o_b(2 * d, -2.0), o(2 * d, std::numeric_limits<double>::quiet_NaN());
  std::vector<double> lse_a = {kNegInf, kNegInf}, lse_b = {kNegInf, 0.25}, lse(2, std::numeric_limits<double>::quiet_NaN());
  const auto view = [&](std::vector<double>& v) { return HostTensor<double>::bnhd(v.data(), 2, 1, d); };
  const auto cview = [&](const std::vector<double>& v) { return HostTensor<const double>::bnhd(v.data(), 2, 1, d); };
  reference::merge_states(1, 2, 1, d, cview(o_a), lse_a.data(), cview(o_b), lse_b.data(), view(o), lse.data());
  CHECK(lse[0] == kNegInf);
  CHECK(lse[1] == 0.25);
  for (std::int64_t i = 0; i < d; ++i) {
    CHECK(o[static_cast<std::size_t>(i)] == 0.0);
    CHECK(o[static_cast<std::size_t>(d + i)] == -2.0);
  }
}

TEST_CASE("the KV-cache reference refuses what the API refuses") {
  KvCacheProblem p = base_problem(1, 1, 3, 2, 8, MaskKind::kNone);
  std::vector<double> q(24), o(24);
  HostCache cache(p);
  const auto run_it = [&](const KvCacheProblem& bad) {
    reference::attention_with_kvcache(bad, HostTensor<const double>::bnhd(q.data(), 1, 3, 8), cache.k_view(),
                                      cache.v_view(), nullptr, nullptr, HostTensor<double>::bnhd(o.data(), 1, 3, 8),
                                      nullptr);
  };
  CHECK_THROWS_AS(run_it(p), std::invalid_argument);  // heads_q % heads_kv
  p.heads_q = 4;
  p.mask = MaskKind::kCausalTopLeft;
  CHECK_THROWS_AS(run_it(p), std::invalid_argument);
  p.mask = MaskKind::kNone;
  p.seqlen_new = 1;  // without cache_seqlens
  CHECK_THROWS_AS(run_it(p), std::invalid_argument);
}

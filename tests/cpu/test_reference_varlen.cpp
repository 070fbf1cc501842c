// The varlen reference (varlen_reference.hpp) against the dense reference run on each sequence's own copy:
// lengths 1, 2 and odd, a sequence without keys, bottom-right with more queries than keys, GQA, seqused_k,
// rows outside every sequence left alone, and its argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "flashrtc_reference/varlen_reference.hpp"

using namespace flashrtc;
using flashrtc::reference::HostTensor;
using flashrtc::reference::VarlenProblem;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Two runs of the same double computation on differently strided copies differ at most by summation order.
constexpr double kSameMathTolerance = 1e-13;

std::vector<std::int32_t> prefix_sums(const std::vector<std::int32_t>& lengths) {
  std::vector<std::int32_t> cu{0};
  for (std::int32_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

std::vector<double> normal_values(std::int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(n));
  for (double& x : values) x = normal(rng);
  return values;
}

// A packed call's host tensors: q, k, v random; o and lse NaN until written. `spare_q` extra query rows after
// the last sequence belong to none.
struct Packed {
  VarlenProblem p;
  std::int64_t rows_q, rows_k;
  std::vector<double> q, k, v, o, lse;
  Packed(VarlenProblem problem, std::mt19937_64& rng, std::int64_t spare_q = 0)
      : p(std::move(problem)), rows_q(p.total_q() + spare_q), rows_k(p.total_k()) {
    p.rows_q = rows_q;
    q = normal_values(rows_q * p.heads_q * p.head_dim, rng);
    k = normal_values(rows_k * p.heads_kv * p.head_dim, rng);
    v = normal_values(rows_k * p.heads_kv * p.head_dim, rng);
    o.assign(q.size(), std::nan(""));
    lse.assign(static_cast<std::size_t>(p.heads_q * rows_q), std::nan(""));
  }
  void run() {
    reference::forward_varlen(p, view(q, rows_q, p.heads_q), view(k, rows_k, p.heads_kv),
                              view(v, rows_k, p.heads_kv),
                              HostTensor<double>::bnhd(o.data(), rows_q, p.heads_q, p.head_dim), lse.data());
  }
  HostTensor<const double> view(const std::vector<double>& t, std::int64_t rows, std::int64_t heads) const {
    return HostTensor<const double>::bnhd(t.data(), rows, heads, p.head_dim);
  }
};

// Sequence b's rows of a packed [rows, heads, d] tensor as its own dense [1, n, heads, d] copy.
std::vector<double> copy_rows(const std::vector<double>& t, std::int64_t start, std::int64_t n,
                              std::int64_t heads, std::int64_t head_dim) {
  const std::int64_t row = heads * head_dim;
  return {t.begin() + start * row, t.begin() + (start + n) * row};
}

// Every sequence of a packed call equals the dense reference on its own copy (o and lse), rows outside every
// sequence stay NaN.
void check_against_dense(Packed& c) {
  c.run();
  const VarlenProblem& p = c.p;
  const std::int64_t hd = p.head_dim;
  for (std::int64_t b = 0; b < p.batch(); ++b) {
    CAPTURE(b);
    const reference::Problem sp = p.sequence_problem(b);
    const std::int64_t sq = p.cu_seqlens_q[b], sk = p.cu_seqlens_k[b];
    if (sp.seqlen_q == 0) continue;
    for (std::int64_t i = 0; i < sp.seqlen_q; ++i)
      for (std::int64_t h = 0; h < p.heads_q; ++h) {
        if (sp.seqlen_kv == 0 || (p.mask == MaskKind::kCausalBottomRight && i < sp.seqlen_q - sp.seqlen_kv)) {
          CHECK(c.lse[h * c.rows_q + sq + i] == kNegInf);
          for (std::int64_t d = 0; d < hd; ++d) CHECK(c.o[((sq + i) * p.heads_q + h) * hd + d] == 0.0);
        }
      }
    if (sp.seqlen_kv == 0) continue;
    const std::vector<double> q = copy_rows(c.q, sq, sp.seqlen_q, p.heads_q, hd);
    const std::vector<double> k = copy_rows(c.k, sk, sp.seqlen_kv, p.heads_kv, hd);
    const std::vector<double> v = copy_rows(c.v, sk, sp.seqlen_kv, p.heads_kv, hd);
    std::vector<double> o(q.size()), lse(static_cast<std::size_t>(p.heads_q * sp.seqlen_q));
    reference::forward(sp, HostTensor<const double>::bnhd(q.data(), sp.seqlen_q, p.heads_q, hd),
                       HostTensor<const double>::bnhd(k.data(), sp.seqlen_kv, p.heads_kv, hd),
                       HostTensor<const double>::bnhd(v.data(), sp.seqlen_kv, p.heads_kv, hd),
                       HostTensor<double>::bnhd(o.data(), sp.seqlen_q, p.heads_q, hd), lse.data());
    for (std::size_t e = 0; e < o.size(); ++e)
      REQUIRE(std::abs(c.o[static_cast<std::size_t>(sq * p.heads_q * hd) + e] - o[e]) <= kSameMathTolerance);
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < sp.seqlen_q; ++i) {
        const double want = lse[static_cast<std::size_t>(h * sp.seqlen_q + i)];
        const double got = c.lse[static_cast<std::size_t>(h * c.rows_q + sq + i)];
        if (std::isinf(want))
          REQUIRE(got == want);
        else
          REQUIRE(std::abs(got - want) <= kSameMathTolerance);
      }
  }
  for (std::int64_t r = p.cu_seqlens_q.back(); r < c.rows_q; ++r) {
    for (std::int64_t e = 0; e < p.heads_q * hd; ++e) CHECK(std::isnan(c.o[r * p.heads_q * hd + e]));
    for (std::int64_t h = 0; h < p.heads_q; ++h) CHECK(std::isnan(c.lse[h * c.rows_q + r]));
  }
}

VarlenProblem problem(const std::vector<std::int32_t>& lengths_q, const std::vector<std::int32_t>& lengths_k,
                      MaskKind mask, std::int64_t heads_q = 2, std::int64_t heads_kv = 1,
                      std::int64_t head_dim = 16) {
  VarlenProblem p;
  p.cu_seqlens_q = prefix_sums(lengths_q);
  p.cu_seqlens_k = prefix_sums(lengths_k);
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.mask = mask;
  return p;
}

}  // namespace

TEST_CASE("varlen reference: every sequence equals the dense reference on its slice, every mask, GQA") {
  std::mt19937_64 rng(41);
  for (MaskKind mask : kMaskKinds) {
    CAPTURE(to_string(mask));
    // Lengths 1, 2, odd, Nq != Nk both ways, a sequence without keys, one without queries.
    Packed c(problem({1, 2, 7, 5, 3, 0, 13}, {1, 2, 7, 9, 0, 4, 6}, mask, 4, 2), rng);
    check_against_dense(c);
  }
}

TEST_CASE("varlen reference: a sequence without keys gets o = 0 and lse = -inf") {
  std::mt19937_64 rng(7);
  Packed c(problem({3, 2}, {0, 4}, MaskKind::kNone), rng);
  c.run();
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t h = 0; h < 2; ++h) {
      CHECK(c.lse[h * c.rows_q + i] == kNegInf);
      for (std::int64_t d = 0; d < 16; ++d) CHECK(c.o[(i * 2 + h) * 16 + d] == 0.0);
    }
  CHECK(std::isfinite(c.lse[3]));
}

TEST_CASE(
    "varlen reference: bottom-right causal with more queries than keys counts from each sequence's start") {
  std::mt19937_64 rng(3);
  Packed c(problem({5, 4}, {2, 4}, MaskKind::kCausalBottomRight, 1, 1), rng);
  check_against_dense(c);
  // Sequence 0: queries 0..2 see no key; query 3 sees key 0 only, so o is that key's value.
  for (std::int64_t i = 0; i < 3; ++i) CHECK(c.lse[i] == kNegInf);
  for (std::int64_t d = 0; d < 16; ++d) CHECK(c.o[3 * 16 + d] == doctest::Approx(c.v[d]).epsilon(1e-12));
  // Sequence 1 (Nq = Nk): its first query sees its own first key, not sequence 0's.
  for (std::int64_t d = 0; d < 16; ++d)
    CHECK(c.o[5 * 16 + d] == doctest::Approx(c.v[2 * 16 + d]).epsilon(1e-12));
}

TEST_CASE("varlen reference: top-left causal counts from each sequence's start") {
  std::mt19937_64 rng(5);
  Packed c(problem({3, 3}, {3, 3}, MaskKind::kCausalTopLeft, 1, 1), rng);
  check_against_dense(c);
  // The first query of each sequence sees only that sequence's first key.
  for (std::int64_t d = 0; d < 16; ++d) {
    CHECK(c.o[d] == doctest::Approx(c.v[d]).epsilon(1e-12));
    CHECK(c.o[3 * 16 + d] == doctest::Approx(c.v[3 * 16 + d]).epsilon(1e-12));
  }
}

TEST_CASE("varlen reference: 1000 sequences of length 1..17, a batch of one") {
  std::mt19937_64 rng(1000);
  std::uniform_int_distribution<std::int32_t> length(1, 17);
  std::vector<std::int32_t> lq(1000), lk(1000);
  for (std::size_t b = 0; b < lq.size(); ++b) lq[b] = length(rng), lk[b] = length(rng);
  Packed many(problem(lq, lk, MaskKind::kCausalBottomRight, 2, 1, 8), rng);
  check_against_dense(many);
  Packed one(problem({33}, {47}, MaskKind::kCausalTopLeft), rng);
  check_against_dense(one);
}

TEST_CASE(
    "varlen reference: seqused_k hides a sequence's later keys; rows after the last sequence stay "
    "unwritten") {
  std::mt19937_64 rng(11);
  VarlenProblem used = problem({4, 3}, {6, 5}, MaskKind::kCausalBottomRight);
  used.seqused_k = {2, 5};
  Packed c(used, rng, 3);
  check_against_dense(c);  // sequence_problem(b) takes seqused_k's lengths, so dense sees only the used keys
  CHECK(used.sequence_problem(0).seqlen_kv == 2);
}

TEST_CASE("varlen reference: malformed problems throw") {
  std::mt19937_64 rng(1);
  std::vector<double> t(64, 0.0), out(64, 0.0), lse(8, 0.0);
  const auto run = [&](const VarlenProblem& p) {
    reference::forward_varlen(p, HostTensor<const double>::bnhd(t.data(), 4, 1, 16),
                              HostTensor<const double>::bnhd(t.data(), 4, 1, 16),
                              HostTensor<const double>::bnhd(t.data(), 4, 1, 16),
                              HostTensor<double>::bnhd(out.data(), 4, 1, 16), lse.data());
  };
  VarlenProblem ok = problem({2, 2}, {2, 2}, MaskKind::kNone, 1, 1);
  CHECK_NOTHROW(run(ok));
  VarlenProblem p = ok;
  p.cu_seqlens_q = {0};
  p.cu_seqlens_k = {0};
  CHECK_THROWS_AS(run(p), std::invalid_argument);
  p = ok;
  p.cu_seqlens_k = {0, 4};
  CHECK_THROWS_AS(run(p), std::invalid_argument);
  p = ok;
  p.cu_seqlens_q = {0, 3, 2};
  CHECK_THROWS_AS(run(p), std::invalid_argument);
  p = ok;
  p.cu_seqlens_q = {1, 2, 4};
  CHECK_THROWS_AS(run(p), std::invalid_argument);
  p = ok;
  p.seqused_k = {3, 0};
  CHECK_THROWS_AS(run(p), std::invalid_argument);
  p = ok;
  p.seqused_k = {1};
  CHECK_THROWS_AS(run(p), std::invalid_argument);
  p = ok;
  p.heads_q = 3;
  p.heads_kv = 2;
  CHECK_THROWS_AS(run(p), std::invalid_argument);
  p = ok;
  p.rows_q = 3;
  CHECK_THROWS_AS(run(p), std::invalid_argument);
}

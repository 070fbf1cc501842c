// The varlen reference backward (varlen_reference.hpp) against the dense reference backward run on each
// sequence's own copy, in double and at input precision: lengths 1, 2 and odd, sequences without keys or
// queries, bottom-right with more queries than keys, GQA, seqused_k (keys past it get dK = dV = 0), rows
// outside every sequence left alone, and its argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

#include "flashrtc_reference/varlen_reference.hpp"

using namespace flashrtc;
using flashrtc::reference::HostTensor;
using flashrtc::reference::VarlenProblem;

namespace {

// Two runs of the same double computation on differently strided copies differ at most by summation order.
constexpr double kSameMathTolerance = 1e-12;

std::vector<std::int32_t> prefix_sums(const std::vector<std::int32_t>& lengths) {
  std::vector<std::int32_t> cu{0};
  for (std::int32_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

std::vector<double> normal_values(std::int64_t n, std::mt19937_64& rng, std::optional<DType> dtype) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(n));
  for (double& x : values) x = dtype ? reference::round_to(*dtype, normal(rng)) : normal(rng);
  return values;
}

std::vector<double> copy_rows(const std::vector<double>& t, std::int64_t start, std::int64_t n,
                              std::int64_t heads, std::int64_t head_dim) {
  const std::int64_t row = heads * head_dim;
  return {t.begin() + start * row, t.begin() + (start + n) * row};
}

VarlenProblem problem(const std::vector<std::int32_t>& lengths_q, const std::vector<std::int32_t>& lengths_k,
                      MaskKind mask, std::int64_t heads_q = 4, std::int64_t heads_kv = 2,
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

// Runs the varlen forward, then the varlen backward (double, or at input precision), and checks every
// sequence against the dense reference on its own copies; rows of no sequence keep their NaN.
void check_against_dense(VarlenProblem p, std::uint64_t seed, std::optional<DType> precision = std::nullopt,
                         std::int64_t spare_q = 0) {
  std::mt19937_64 rng(seed);
  const std::int64_t rows_q = p.total_q() + spare_q, rows_k = p.total_k(), hd = p.head_dim;
  p.rows_q = rows_q;
  const auto view = [&](const std::vector<double>& t, std::int64_t rows, std::int64_t heads) {
    return HostTensor<const double>::bnhd(t.data(), rows, heads, hd);
  };
  const auto out = [&](std::vector<double>& t, std::int64_t rows, std::int64_t heads) {
    return HostTensor<double>::bnhd(t.data(), rows, heads, hd);
  };
  const std::vector<double> q = normal_values(rows_q * p.heads_q * hd, rng, precision);
  const std::vector<double> k = normal_values(rows_k * p.heads_kv * hd, rng, precision);
  const std::vector<double> v = normal_values(rows_k * p.heads_kv * hd, rng, precision);
  const std::vector<double> dout = normal_values(rows_q * p.heads_q * hd, rng, precision);
  std::vector<double> o(q.size(), 0.0), lse(static_cast<std::size_t>(p.heads_q * rows_q), 0.0);
  reference::forward_varlen(p, view(q, rows_q, p.heads_q), view(k, rows_k, p.heads_kv),
                            view(v, rows_k, p.heads_kv), out(o, rows_q, p.heads_q), lse.data());
  if (precision)
    for (double& x : o) x = reference::round_to(*precision, x);
  std::vector<double> dq(q.size(), std::nan("")), dk(k.size(), std::nan("")), dv(k.size(), std::nan(""));
  reference::backward_varlen(p, view(q, rows_q, p.heads_q), view(k, rows_k, p.heads_kv),
                             view(v, rows_k, p.heads_kv), view(o, rows_q, p.heads_q), lse.data(),
                             view(dout, rows_q, p.heads_q), out(dq, rows_q, p.heads_q),
                             out(dk, rows_k, p.heads_kv), out(dv, rows_k, p.heads_kv), precision);

  const std::int64_t row_q = p.heads_q * hd, row_k = p.heads_kv * hd;
  for (std::int64_t b = 0; b < p.batch(); ++b) {
    CAPTURE(b);
    const reference::Problem sp = p.sequence_problem(b);
    const std::int64_t sq = p.cu_seqlens_q[b], sk = p.cu_seqlens_k[b];
    const std::int64_t key_rows = p.cu_seqlens_k[b + 1] - sk;
    const bool runs = sp.seqlen_q > 0 && sp.seqlen_kv > 0;
    // Keys no query sees: past seqused_k, or every key where the sequence has no queries or no keys used.
    for (std::int64_t j = runs ? sp.seqlen_kv : 0; j < key_rows; ++j)
      for (std::int64_t e = 0; e < row_k; ++e) {
        REQUIRE(dk[static_cast<std::size_t>((sk + j) * row_k + e)] == 0.0);
        REQUIRE(dv[static_cast<std::size_t>((sk + j) * row_k + e)] == 0.0);
      }
    if (sp.seqlen_q > 0 && sp.seqlen_kv == 0)
      for (std::int64_t e = 0; e < sp.seqlen_q * row_q; ++e)
        REQUIRE(dq[static_cast<std::size_t>(sq * row_q + e)] == 0.0);
    if (!runs) continue;
    const std::vector<double> q_b = copy_rows(q, sq, sp.seqlen_q, p.heads_q, hd);
    const std::vector<double> o_b = copy_rows(o, sq, sp.seqlen_q, p.heads_q, hd);
    const std::vector<double> dout_b = copy_rows(dout, sq, sp.seqlen_q, p.heads_q, hd);
    const std::vector<double> k_b = copy_rows(k, sk, sp.seqlen_kv, p.heads_kv, hd);
    const std::vector<double> v_b = copy_rows(v, sk, sp.seqlen_kv, p.heads_kv, hd);
    std::vector<double> lse_b(static_cast<std::size_t>(p.heads_q * sp.seqlen_q));
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < sp.seqlen_q; ++i)
        lse_b[static_cast<std::size_t>(h * sp.seqlen_q + i)] =
            lse[static_cast<std::size_t>(h * rows_q + sq + i)];
    std::vector<double> dq_b(q_b.size()), dk_b(k_b.size()), dv_b(k_b.size());
    const auto args = [&](auto&& f) {
      f(view(q_b, sp.seqlen_q, p.heads_q), view(k_b, sp.seqlen_kv, p.heads_kv),
        view(v_b, sp.seqlen_kv, p.heads_kv), view(o_b, sp.seqlen_q, p.heads_q), lse_b.data(),
        view(dout_b, sp.seqlen_q, p.heads_q), out(dq_b, sp.seqlen_q, p.heads_q),
        out(dk_b, sp.seqlen_kv, p.heads_kv), out(dv_b, sp.seqlen_kv, p.heads_kv));
    };
    if (precision)
      args([&](auto... a) { reference::backward_input_precision(sp, *precision, a...); });
    else
      args([&](auto... a) { reference::backward(sp, a...); });
    for (std::size_t e = 0; e < dq_b.size(); ++e)
      REQUIRE(std::abs(dq[static_cast<std::size_t>(sq * row_q) + e] - dq_b[e]) <= kSameMathTolerance);
    for (std::size_t e = 0; e < dk_b.size(); ++e) {
      REQUIRE(std::abs(dk[static_cast<std::size_t>(sk * row_k) + e] - dk_b[e]) <= kSameMathTolerance);
      REQUIRE(std::abs(dv[static_cast<std::size_t>(sk * row_k) + e] - dv_b[e]) <= kSameMathTolerance);
    }
  }
  for (std::size_t e = static_cast<std::size_t>(p.cu_seqlens_q.back() * row_q); e < dq.size(); ++e)
    REQUIRE(std::isnan(dq[e]));
}

}  // namespace

TEST_CASE("varlen reference backward: every sequence equals the dense backward on its slice, every mask") {
  // Sequence 3 has no keys (dQ = 0), sequence 4 no queries (its keys' dK = dV = 0).
  const std::vector<std::int32_t> lq = {1, 2, 7, 5, 0, 13, 3};
  const std::vector<std::int32_t> lk = {1, 2, 9, 0, 4, 6, 11};
  std::uint64_t seed = 1;
  for (MaskKind mask : kMaskKinds) {
    CAPTURE(mask);
    check_against_dense(problem(lq, lk, mask), seed++);
    check_against_dense(problem(lq, lk, mask, 2, 2), seed++, std::nullopt, 3);
    check_against_dense(problem(lq, lk, mask, 4, 1), seed++, DType::kBFloat16);
    check_against_dense(problem(lq, lk, mask), seed++, DType::kFloat16, 2);
  }
}

TEST_CASE("varlen reference backward: seqused_k zeroes the gradients of the keys past it") {
  std::uint64_t seed = 100;
  for (MaskKind mask : kMaskKinds) {
    VarlenProblem p = problem({4, 3, 6}, {6, 5, 2}, mask);
    p.seqused_k = {2, 0, 2};
    check_against_dense(p, seed++);
    check_against_dense(p, seed++, DType::kFloat16);
  }
}

TEST_CASE("varlen reference backward: a batch of one is the dense backward; malformed problems throw") {
  check_against_dense(problem({9}, {5}, MaskKind::kCausalBottomRight, 2, 1), 200);
  VarlenProblem p = problem({2, 2}, {2, 2}, MaskKind::kNone, 1, 1);
  std::vector<double> t(64, 0.0), lse(4, 0.0);
  const auto run = [&](const VarlenProblem& bad, const double* lse_ptr) {
    const HostTensor<const double> in = HostTensor<const double>::bnhd(t.data(), 4, 1, 16);
    const HostTensor<double> out = HostTensor<double>::bnhd(t.data(), 4, 1, 16);
    reference::backward_varlen(bad, in, in, in, in, lse_ptr, in, out, out, out);
  };
  CHECK_NOTHROW(run(p, lse.data()));
  CHECK_THROWS_AS(run(p, nullptr), std::invalid_argument);
  VarlenProblem bad = p;
  bad.cu_seqlens_k = {0, 3, 2};
  CHECK_THROWS_AS(run(bad, lse.data()), std::invalid_argument);
  bad = p;
  bad.seqused_k = {3, 0};
  CHECK_THROWS_AS(run(bad, lse.data()), std::invalid_argument);
}

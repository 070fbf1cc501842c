// The Eigen double reference against direct loops, and against answers known in closed form (so that a
// mistake both implementations share, such as a wrong mask or head mapping, still fails).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "support/reference_problem.hpp"

using namespace flashrtc;
using flashrtc::reference::Problem;
using flashrtc::testing::Inputs;
using flashrtc::testing::Outputs;
using flashrtc::testing::RefLayout;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Two exact-arithmetic-equivalent double computations differ only by summation order.
constexpr double kSameMathTolerance = 1e-13;

Problem make_problem(MaskKind mask, std::int64_t heads_q, std::int64_t heads_kv, std::int64_t seqlen_q,
                     std::int64_t seqlen_kv, std::int64_t head_dim = 32,
                     std::optional<double> scale = std::nullopt) {
  return flashrtc::testing::make_reference_problem(2, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim, mask,
                                                   scale);
}

}  // namespace

TEST_CASE("effective_scale defaults to 1/sqrt(d) and keeps an explicit scale") {
  Problem p;
  p.head_dim = 64;
  CHECK(p.effective_scale() == 0.125);
  p.scale = -0.3;
  CHECK(p.effective_scale() == -0.3);
}

TEST_CASE("Eigen reference matches direct loops: masks x GQA x lengths x layouts x scales") {
  struct Heads {
    std::int64_t q, kv;
  };
  // Hq/Hkv = 1, 4 and Hq (multi-query).
  constexpr Heads kHeads[] = {{8, 8}, {8, 2}, {8, 1}};
  struct Lengths {
    std::int64_t q, kv;
  };
  constexpr Lengths kLengths[] = {{1, 1}, {17, 17}, {64, 64}, {17, 64}, {64, 17}, {1, 64}, {64, 1}};
  std::uint32_t seed = 1;
  int cases = 0;
  for (MaskKind mask : testing::kAllMasks)
    for (const Heads& heads : kHeads)
      for (const Lengths& len : kLengths)
        for (RefLayout layout : {RefLayout::kBnhd, RefLayout::kBhnd})
          for (std::optional<double> scale :
               {std::optional<double>(), std::optional<double>(0.0), std::optional<double>(0.7)}) {
            const Problem p = make_problem(mask, heads.q, heads.kv, len.q, len.kv, 32, scale);
            Inputs in(p, layout, ++seed);
            Outputs eigen_out(p), loop_out(p);
            reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), eigen_out.o.view(),
                               eigen_out.lse.data());
            reference::forward_loops(p, in.q.cview(), in.k.cview(), in.v.cview(), loop_out.o.view(),
                                     loop_out.lse.data());
            INFO(testing::describe(p, layout));
            CHECK(testing::max_relative_difference(eigen_out.o.values, loop_out.o.values) <
                  kSameMathTolerance);
            CHECK(testing::max_relative_difference(eigen_out.lse, loop_out.lse) < kSameMathTolerance);
            ++cases;
          }
  CHECK(cases == 3 * 3 * 7 * 2 * 3);
}

TEST_CASE("bottom-right mask with Nq > Nk: the first Nq - Nk rows see nothing, o = 0 and lse = -inf") {
  const Problem p = make_problem(MaskKind::kCausalBottomRight, 4, 2, 64, 17);
  const Inputs in(p, RefLayout::kBhnd, 7);
  Outputs eigen_out(p), loop_out(p);
  reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), eigen_out.o.view(), eigen_out.lse.data());
  reference::forward_loops(p, in.q.cview(), in.k.cview(), in.v.cview(), loop_out.o.view(),
                           loop_out.lse.data());
  const std::int64_t masked_rows = p.seqlen_q - p.seqlen_kv;
  for (Outputs* out : {&eigen_out, &loop_out}) {
    const auto o = out->o.cview();
    std::int64_t zero_rows = 0, finite_rows = 0;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
          const double lse = out->lse[(b * p.heads_q + h) * p.seqlen_q + i];
          bool all_zero = true, all_finite = true;
          for (std::int64_t d = 0; d < p.head_dim; ++d) {
            all_zero = all_zero && o.at(b, i, h, d) == 0.0;
            all_finite = all_finite && std::isfinite(o.at(b, i, h, d));
          }
          if (i < masked_rows) {
            CHECK(all_zero);
            CHECK(lse == kNegInf);
            zero_rows += all_zero;
          } else {
            CHECK(all_finite);
            CHECK(std::isfinite(lse));
            CHECK_FALSE(all_zero);
            finite_rows += all_finite;
          }
        }
    CHECK(zero_rows == p.batch * p.heads_q * masked_rows);
    CHECK(finite_rows == p.batch * p.heads_q * p.seqlen_kv);
  }
}

TEST_CASE("closed forms: one key, the first causal query, identical keys") {
  for (RefLayout layout : {RefLayout::kBnhd, RefLayout::kBhnd}) {
    // One key: softmax is 1, o is that key's value row, lse is the one scaled score.
    Problem p = make_problem(MaskKind::kNone, 4, 2, 17, 1, 16, 0.3);
    Inputs in(p, layout, 11);
    Outputs out(p);
    reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data());
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
          double dot = 0;
          for (std::int64_t d = 0; d < p.head_dim; ++d) {
            CHECK(out.o.view().at(b, i, h, d) ==
                  doctest::Approx(in.v.cview().at(b, 0, h / 2, d)).epsilon(1e-14));
            dot += in.q.cview().at(b, i, h, d) * in.k.cview().at(b, 0, h / 2, d);
          }
          CHECK(out.lse[(b * p.heads_q + h) * p.seqlen_q + i] == doctest::Approx(0.3 * dot).epsilon(1e-13));
        }
  }
  {
    // Top-left causal: query i sees keys 0..i, so query 0 returns value row 0 whatever the scores.
    const Problem p = make_problem(MaskKind::kCausalTopLeft, 2, 2, 17, 64);
    const Inputs in(p, RefLayout::kBnhd, 12);
    Outputs out(p);
    reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data());
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t d = 0; d < p.head_dim; ++d)
        CHECK(out.o.view().at(1, 0, h, d) == doctest::Approx(in.v.cview().at(1, 0, h, d)).epsilon(1e-14));
  }
  {
    // Identical keys: uniform weights over the visible keys, o is the mean of their values and
    // lse = score + log(count). Bottom-right with Nk - Nq = 47: query i sees 48 + i keys.
    const Problem p = make_problem(MaskKind::kCausalBottomRight, 1, 1, 17, 64);
    Inputs in(p, RefLayout::kBnhd, 13);
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t j = 1; j < p.seqlen_kv; ++j)
        for (std::int64_t d = 0; d < p.head_dim; ++d) in.k.view().at(b, j, 0, d) = in.k.view().at(b, 0, 0, d);
    Outputs out(p);
    reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data());
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
        const std::int64_t visible = i + p.seqlen_kv - p.seqlen_q + 1;
        double dot = 0;
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          double mean = 0;
          for (std::int64_t j = 0; j < visible; ++j) mean += in.v.cview().at(b, j, 0, d);
          mean /= static_cast<double>(visible);
          CHECK(out.o.view().at(b, i, 0, d) == doctest::Approx(mean).epsilon(1e-12));
          dot += in.q.cview().at(b, i, 0, d) * in.k.cview().at(b, 0, 0, d);
        }
        const double expected_lse =
            dot / std::sqrt(static_cast<double>(p.head_dim)) + std::log(double(visible));
        CHECK(out.lse[b * p.seqlen_q + i] == doctest::Approx(expected_lse).epsilon(1e-13));
      }
  }
}

TEST_CASE("GQA: query head h reads kv head h / (Hq / Hkv), the same as with kv heads repeated") {
  const Problem grouped = make_problem(MaskKind::kCausalTopLeft, 8, 2, 17, 33);
  Problem repeated = grouped;
  repeated.heads_kv = grouped.heads_q;
  const Inputs in(grouped, RefLayout::kBnhd, 21);
  testing::OwnedTensor k_rep(repeated.batch, repeated.seqlen_kv, repeated.heads_kv, repeated.head_dim,
                             RefLayout::kBnhd);
  testing::OwnedTensor v_rep = k_rep;
  for (std::int64_t b = 0; b < grouped.batch; ++b)
    for (std::int64_t j = 0; j < grouped.seqlen_kv; ++j)
      for (std::int64_t h = 0; h < grouped.heads_q; ++h)
        for (std::int64_t d = 0; d < grouped.head_dim; ++d) {
          k_rep.view().at(b, j, h, d) = in.k.cview().at(b, j, h / 4, d);
          v_rep.view().at(b, j, h, d) = in.v.cview().at(b, j, h / 4, d);
        }
  Outputs grouped_out(grouped), repeated_out(repeated), repeated_loops(repeated);
  reference::forward(grouped, in.q.cview(), in.k.cview(), in.v.cview(), grouped_out.o.view(),
                     grouped_out.lse.data());
  reference::forward(repeated, in.q.cview(), k_rep.cview(), v_rep.cview(), repeated_out.o.view(),
                     repeated_out.lse.data());
  reference::forward_loops(repeated, in.q.cview(), k_rep.cview(), v_rep.cview(), repeated_loops.o.view(),
                           repeated_loops.lse.data());
  CHECK(testing::max_relative_difference(grouped_out.o.values, repeated_out.o.values) == 0.0);
  CHECK(testing::max_relative_difference(grouped_out.lse, repeated_out.lse) == 0.0);
  CHECK(testing::max_relative_difference(grouped_out.o.values, repeated_loops.o.values) < kSameMathTolerance);
}

TEST_CASE("both layouts and a d-strided view of the same values give the same result; the scale matters") {
  const Problem p = make_problem(MaskKind::kNone, 4, 4, 17, 64);
  const Inputs bnhd(p, RefLayout::kBnhd, 31);
  Inputs bhnd(p, RefLayout::kBhnd, 32);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t d = 0; d < p.head_dim; ++d) {
        for (std::int64_t i = 0; i < p.seqlen_q; ++i)
          bhnd.q.view().at(b, i, h, d) = bnhd.q.cview().at(b, i, h, d);
        for (std::int64_t j = 0; j < p.seqlen_kv; ++j) {
          bhnd.k.view().at(b, j, h, d) = bnhd.k.cview().at(b, j, h, d);
          bhnd.v.view().at(b, j, h, d) = bnhd.v.cview().at(b, j, h, d);
        }
      }
  Outputs a(p), b(p);
  reference::forward(p, bnhd.q.cview(), bnhd.k.cview(), bnhd.v.cview(), a.o.view(), a.lse.data());
  reference::forward(p, bhnd.q.cview(), bhnd.k.cview(), bhnd.v.cview(), b.o.view(), b.lse.data());
  CHECK(testing::max_relative_difference(a.o.values, b.o.values) == 0.0);
  CHECK(testing::max_relative_difference(a.lse, b.lse) == 0.0);

  // A view whose elements are not contiguous along d ([B, N, d, H] storage: stride_dim = H), for q only.
  std::vector<double> q_dh(bnhd.q.values.size());
  const reference::HostTensor<double> q_view{q_dh.data(), p.seqlen_q * p.heads_q * p.head_dim,
                                             p.heads_q * p.head_dim, 1, p.heads_q};
  for (std::int64_t bi = 0; bi < p.batch; ++bi)
    for (std::int64_t i = 0; i < p.seqlen_q; ++i)
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        for (std::int64_t d = 0; d < p.head_dim; ++d) q_view.at(bi, i, h, d) = bnhd.q.cview().at(bi, i, h, d);
  const reference::HostTensor<const double> q_const{q_dh.data(), q_view.stride_batch, q_view.stride_seq,
                                                    q_view.stride_head, q_view.stride_dim};
  Outputs c(p), loops(p);
  reference::forward(p, q_const, bnhd.k.cview(), bnhd.v.cview(), c.o.view(), c.lse.data());
  reference::forward_loops(p, q_const, bnhd.k.cview(), bnhd.v.cview(), loops.o.view(), loops.lse.data());
  CHECK(testing::max_relative_difference(c.o.values, a.o.values) == 0.0);
  CHECK(testing::max_relative_difference(loops.o.values, a.o.values) < kSameMathTolerance);

  Problem explicit_default = p;
  explicit_default.scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  Problem other = p;
  other.scale = 2.0;
  Outputs same(p), different(p);
  reference::forward(explicit_default, bnhd.q.cview(), bnhd.k.cview(), bnhd.v.cview(), same.o.view(),
                     same.lse.data());
  reference::forward(other, bnhd.q.cview(), bnhd.k.cview(), bnhd.v.cview(), different.o.view(),
                     different.lse.data());
  CHECK(testing::max_relative_difference(same.o.values, a.o.values) == 0.0);
  CHECK(testing::max_relative_difference(different.o.values, a.o.values) > 1e-2);
}

TEST_CASE("forward_head writes only its own head") {
  const Problem p = make_problem(MaskKind::kCausalBottomRight, 4, 1, 17, 17);
  const Inputs in(p, RefLayout::kBnhd, 41);
  Outputs out(p), all(p);
  reference::forward_head(p, 1, 2, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data());
  reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), all.o.view(), all.lse.data());
  auto o = out.o.view();
  auto o_all = all.o.view();
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
        const bool mine = b == 1 && h == 2;
        const std::size_t row = static_cast<std::size_t>((b * p.heads_q + h) * p.seqlen_q + i);
        CHECK(std::isnan(out.lse[row]) != mine);
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          if (mine)
            CHECK(o.at(b, i, h, d) == o_all.at(b, i, h, d));
          else
            CHECK(std::isnan(o.at(b, i, h, d)));
        }
      }
  // A null lse is allowed.
  reference::forward_head(p, 0, 0, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), nullptr);
  CHECK(o.at(0, 3, 0, 5) == o_all.at(0, 3, 0, 5));
}

TEST_CASE("invalid problems are rejected") {
  Problem p = make_problem(MaskKind::kNone, 6, 4, 17, 17);
  const Problem valid = make_problem(MaskKind::kNone, 4, 4, 17, 17);
  const Inputs in(valid, RefLayout::kBnhd, 51);
  Outputs out(valid);
  CHECK_THROWS_AS(
      reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data()),
      std::invalid_argument);
  p = valid;
  p.seqlen_kv = 0;
  CHECK_THROWS_AS(
      reference::forward_loops(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      reference::forward_head(valid, 0, 4, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), nullptr),
      std::invalid_argument);
}

// The analytic reference gradients against central finite differences of the reference forward, entry by
// entry, for the loss L = sum(dO * O) with a fixed random dO; plus the identities the backward relies on.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "support/reference_problem.hpp"

using namespace flashrtc;
using flashrtc::reference::Problem;
using flashrtc::testing::Inputs;
using flashrtc::testing::Outputs;
using flashrtc::testing::OwnedTensor;
using flashrtc::testing::RefLayout;

namespace {

// Central difference step: truncation error ~ step^2, rounding error ~ 1e-16 * |L| / step, both far below the
// tolerance for these small problems.
constexpr double kStep = 1e-6;
constexpr double kFdTolerance = 1e-6;  // |analytic - fd| <= kFdTolerance * (1 + |fd|)
// Two exact-arithmetic-equivalent double computations differ only by summation order.
constexpr double kSameMathTolerance = 1e-12;

/// One problem with its forward, a fixed random dout and the reference gradients.
struct Case {
  Problem p;
  Inputs in;
  OwnedTensor dout;
  Outputs fwd;
  OwnedTensor dq, dk, dv;  // NaN until written: backward() must overwrite every entry
  Case(const Problem& problem, RefLayout layout, std::uint32_t seed)
      : p(problem),
        in(problem, layout, seed),
        dout(p.batch, p.seqlen_q, p.heads_q, p.head_dim, RefLayout::kBnhd),
        fwd(problem),
        dq(p.batch, p.seqlen_q, p.heads_q, p.head_dim, layout),
        dk(p.batch, p.seqlen_kv, p.heads_kv, p.head_dim, layout),
        dv(p.batch, p.seqlen_kv, p.heads_kv, p.head_dim, layout) {
    std::mt19937 rng(seed + 1000);
    dout.fill_normal(rng);
    reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), fwd.o.view(), fwd.lse.data());
    reference::backward(p, in.q.cview(), in.k.cview(), in.v.cview(), fwd.o.cview(), fwd.lse.data(),
                        dout.cview(), dq.view(), dk.view(), dv.view());
  }

  /// The part of L that query heads [h_begin, h_end) of batch b contribute, from a fresh forward.
  double partial_loss(std::int64_t b, std::int64_t h_begin, std::int64_t h_end) const {
    Outputs out(p);
    double loss = 0;
    for (std::int64_t h = h_begin; h < h_end; ++h) {
      reference::forward_head(p, b, h, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), nullptr);
      for (std::int64_t n = 0; n < p.seqlen_q; ++n)
        for (std::int64_t d = 0; d < p.head_dim; ++d)
          loss += dout.cview().at(b, n, h, d) * out.o.cview().at(b, n, h, d);
    }
    return loss;
  }
};

struct GradientCheck {
  double max_fd = 0;  // max |fd|: the check is not vacuous
  double worst = 0;   // max |analytic - fd| / (1 + |fd|)
  std::int64_t count = 0;
};

/// Checks every entry of grad (of tensor x with `heads` heads) against the central difference of L. Entry
/// (b, n, hx, d) of x only reaches the query heads [hx * group, (hx + 1) * group) of batch b, so only their
/// part of L is recomputed (the other parts cancel exactly in the difference).
GradientCheck check_gradient(const Case& c, OwnedTensor& x, const OwnedTensor& grad, std::int64_t seqlen,
                             std::int64_t heads) {
  const std::int64_t group = c.p.heads_q / heads;
  GradientCheck result;
  for (std::int64_t b = 0; b < c.p.batch; ++b)
    for (std::int64_t n = 0; n < seqlen; ++n)
      for (std::int64_t hx = 0; hx < heads; ++hx)
        for (std::int64_t d = 0; d < c.p.head_dim; ++d) {
          double& entry = x.view().at(b, n, hx, d);
          const double saved = entry;
          entry = saved + kStep;
          const double loss_plus = c.partial_loss(b, hx * group, (hx + 1) * group);
          entry = saved - kStep;
          const double loss_minus = c.partial_loss(b, hx * group, (hx + 1) * group);
          entry = saved;
          const double fd = (loss_plus - loss_minus) / (2 * kStep);
          const double analytic = grad.cview().at(b, n, hx, d);
          const double error = std::fabs(analytic - fd) / (1 + std::fabs(fd));
          result.worst = std::isnan(error) ? INFINITY : std::max(result.worst, error);
          result.max_fd = std::max(result.max_fd, std::fabs(fd));
          ++result.count;
        }
  return result;
}

struct Shape {
  std::int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim;
  std::optional<double> scale;  // unset: the default
  RefLayout layout;
};

// Hq 2..4, Hkv in {1, Hq} and a group of 2; Nq < Nk, Nq = Nk and Nq > Nk (bottom-right rows that see no key);
// d 8 and 16; the default scale, explicit ones and a negative one; both layouts.
constexpr Shape kShapes[] = {
    {1, 2, 2, 5, 7, 8, std::nullopt, RefLayout::kBnhd},  {2, 4, 1, 7, 3, 16, -0.4, RefLayout::kBhnd},
    {1, 3, 3, 6, 6, 8, 0.9, RefLayout::kBhnd},           {2, 2, 1, 4, 9, 8, 0.6, RefLayout::kBnhd},
    {1, 4, 2, 6, 4, 16, std::nullopt, RefLayout::kBnhd},
};

}  // namespace

TEST_CASE("reference gradients match central finite differences of the forward, every entry") {
  std::uint32_t seed = 10;
  for (MaskKind mask : testing::kAllMasks)
    for (const Shape& s : kShapes) {
      const Problem p = testing::make_reference_problem(s.batch, s.heads_q, s.heads_kv, s.seqlen_q,
                                                        s.seqlen_kv, s.head_dim, mask, s.scale);
      Case c(p, s.layout, ++seed);
      INFO(testing::describe(p, s.layout));
      const GradientCheck dq = check_gradient(c, c.in.q, c.dq, p.seqlen_q, p.heads_q);
      const GradientCheck dk = check_gradient(c, c.in.k, c.dk, p.seqlen_kv, p.heads_kv);
      const GradientCheck dv = check_gradient(c, c.in.v, c.dv, p.seqlen_kv, p.heads_kv);
      CHECK(dq.count == p.batch * p.seqlen_q * p.heads_q * p.head_dim);
      CHECK(dk.count == p.batch * p.seqlen_kv * p.heads_kv * p.head_dim);
      CHECK(dq.worst <= kFdTolerance);
      CHECK(dk.worst <= kFdTolerance);
      CHECK(dv.worst <= kFdTolerance);
      CHECK(dq.max_fd > 0.05);
      CHECK(dk.max_fd > 0.05);
      CHECK(dv.max_fd > 0.05);
    }
}

TEST_CASE("rows that see no key (bottom-right, Nq > Nk) get dq = 0 and add nothing to dk, dv") {
  const Problem p = testing::make_reference_problem(1, 2, 1, 7, 3, 8, MaskKind::kCausalBottomRight, 0.5);
  Case c(p, RefLayout::kBnhd, 3);
  const std::int64_t blind_rows = p.seqlen_q - p.seqlen_kv;
  for (std::int64_t h = 0; h < p.heads_q; ++h)
    for (std::int64_t n = 0; n < p.seqlen_q; ++n)
      for (std::int64_t d = 0; d < p.head_dim; ++d) {
        if (n < blind_rows) CHECK(c.dq.cview().at(0, n, h, d) == 0.0);
        // Changing dO on those rows changes nothing either.
        c.dout.view().at(0, n, h, d) += n < blind_rows ? 100.0 : 0.0;
      }
  OwnedTensor dq(1, p.seqlen_q, p.heads_q, p.head_dim, RefLayout::kBnhd);
  OwnedTensor dk(1, p.seqlen_kv, p.heads_kv, p.head_dim, RefLayout::kBnhd), dv = dk;
  reference::backward(p, c.in.q.cview(), c.in.k.cview(), c.in.v.cview(), c.fwd.o.cview(), c.fwd.lse.data(),
                      c.dout.cview(), dq.view(), dk.view(), dv.view());
  CHECK(dq.values == c.dq.values);
  CHECK(dk.values == c.dk.values);
  CHECK(dv.values == c.dv.values);
}

TEST_CASE("D = rowsum(dO * O) equals rowsum(P * dP), P from q, k and lse, dP = dO V^T") {
  for (MaskKind mask : testing::kAllMasks) {
    const Problem p = testing::make_reference_problem(2, 4, 2, 9, 6, 16, mask, -0.7);
    const Case c(p, RefLayout::kBhnd, 21);
    INFO(testing::describe(p, RefLayout::kBhnd));
    std::vector<double> delta(c.fwd.lse.size(), std::numeric_limits<double>::quiet_NaN());
    reference::backward_delta(p, c.fwd.o.cview(), c.dout.cview(), delta.data());
    const double scale = p.effective_scale();
    double worst = 0;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.heads_q; ++h) {
        const std::int64_t hk = h / (p.heads_q / p.heads_kv);
        for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
          const std::size_t index = static_cast<std::size_t>((b * p.heads_q + h) * p.seqlen_q + i);
          const double lse = c.fwd.lse[index];
          double p_dp = 0;
          for (std::int64_t j = 0; j < p.seqlen_kv && std::isfinite(lse); ++j) {
            if (!mask_allows(mask, i, j, p.seqlen_q, p.seqlen_kv)) continue;
            double s = 0, dp = 0;
            for (std::int64_t d = 0; d < p.head_dim; ++d) {
              s += c.in.q.cview().at(b, i, h, d) * c.in.k.cview().at(b, j, hk, d);
              dp += c.dout.cview().at(b, i, h, d) * c.in.v.cview().at(b, j, hk, d);
            }
            p_dp += std::exp(scale * s - lse) * dp;
          }
          worst = std::max(worst, std::fabs(delta[index] - p_dp) / (1 + std::fabs(p_dp)));
        }
      }
    CHECK(worst < kSameMathTolerance);
  }
}

TEST_CASE("GQA: dk and dv of a kv head are the sum over its group of per-head gradients") {
  for (std::int64_t heads_kv : {1, 2}) {
    const Problem gqa =
        testing::make_reference_problem(2, 4, heads_kv, 6, 5, 8, MaskKind::kCausalTopLeft, 0.8);
    Problem mha = gqa;
    mha.heads_kv = gqa.heads_q;
    const Case grouped(gqa, RefLayout::kBnhd, 5);
    const std::int64_t group = gqa.heads_q / heads_kv;
    // Every query head gets its own copy of its kv head; the same dO.
    Inputs expanded(mha, RefLayout::kBnhd, 5);
    expanded.q.values = grouped.in.q.values;
    for (std::int64_t b = 0; b < mha.batch; ++b)
      for (std::int64_t n = 0; n < mha.seqlen_kv; ++n)
        for (std::int64_t h = 0; h < mha.heads_q; ++h)
          for (std::int64_t d = 0; d < mha.head_dim; ++d) {
            expanded.k.view().at(b, n, h, d) = grouped.in.k.cview().at(b, n, h / group, d);
            expanded.v.view().at(b, n, h, d) = grouped.in.v.cview().at(b, n, h / group, d);
          }
    Outputs fwd(mha);
    reference::forward(mha, expanded.q.cview(), expanded.k.cview(), expanded.v.cview(), fwd.o.view(),
                       fwd.lse.data());
    OwnedTensor dq(mha.batch, mha.seqlen_q, mha.heads_q, mha.head_dim, RefLayout::kBnhd);
    OwnedTensor dk(mha.batch, mha.seqlen_kv, mha.heads_kv, mha.head_dim, RefLayout::kBnhd), dv = dk;
    reference::backward(mha, expanded.q.cview(), expanded.k.cview(), expanded.v.cview(), fwd.o.cview(),
                        fwd.lse.data(), grouped.dout.cview(), dq.view(), dk.view(), dv.view());

    CHECK(testing::max_relative_difference(grouped.dq.values, dq.values) < kSameMathTolerance);
    std::vector<double> dk_sum(grouped.dk.values.size(), 0.0), dv_sum = dk_sum;
    const OwnedTensor shape(gqa.batch, gqa.seqlen_kv, gqa.heads_kv, gqa.head_dim, RefLayout::kBnhd);
    for (std::int64_t b = 0; b < mha.batch; ++b)
      for (std::int64_t n = 0; n < mha.seqlen_kv; ++n)
        for (std::int64_t h = 0; h < mha.heads_q; ++h)
          for (std::int64_t d = 0; d < mha.head_dim; ++d) {
            const std::int64_t at =
                b * shape.stride_batch + n * shape.stride_seq + (h / group) * shape.stride_head + d;
            dk_sum[static_cast<std::size_t>(at)] += dk.cview().at(b, n, h, d);
            dv_sum[static_cast<std::size_t>(at)] += dv.cview().at(b, n, h, d);
          }
    CHECK(testing::max_relative_difference(grouped.dk.values, dk_sum) < kSameMathTolerance);
    CHECK(testing::max_relative_difference(grouped.dv.values, dv_sum) < kSameMathTolerance);
  }
}

TEST_CASE("backward_head adds to dk and dv and overwrites dq; bad arguments throw") {
  const Problem p = testing::make_reference_problem(1, 2, 1, 4, 4, 8, MaskKind::kNone, 0.0);
  const Case c(p, RefLayout::kBnhd, 9);
  OwnedTensor dq(1, p.seqlen_q, p.heads_q, p.head_dim, RefLayout::kBnhd, 7.0);
  OwnedTensor dk(1, p.seqlen_kv, p.heads_kv, p.head_dim, RefLayout::kBnhd, 0.0), dv = dk;
  for (int pass = 0; pass < 2; ++pass)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      reference::backward_head(p, 0, h, c.in.q.cview(), c.in.k.cview(), c.in.v.cview(), c.fwd.o.cview(),
                               c.fwd.lse.data(), c.dout.cview(), dq.view(), dk.view(), dv.view());
  CHECK(dq.values == c.dq.values);
  for (std::size_t i = 0; i < dk.values.size(); ++i) {
    CHECK(dk.values[i] == doctest::Approx(2 * c.dk.values[i]).epsilon(1e-12));
    CHECK(dv.values[i] == doctest::Approx(2 * c.dv.values[i]).epsilon(1e-12));
  }
  const auto run = [&](std::int64_t b, std::int64_t h, const double* lse) {
    reference::backward_head(p, b, h, c.in.q.cview(), c.in.k.cview(), c.in.v.cview(), c.fwd.o.cview(), lse,
                             c.dout.cview(), dq.view(), dk.view(), dv.view());
  };
  CHECK_THROWS_AS(run(0, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(run(1, 0, c.fwd.lse.data()), std::invalid_argument);
  CHECK_THROWS_AS(run(0, 2, c.fwd.lse.data()), std::invalid_argument);
  CHECK_THROWS_AS(reference::backward_delta(p, c.fwd.o.cview(), c.dout.cview(), nullptr),
                  std::invalid_argument);
}

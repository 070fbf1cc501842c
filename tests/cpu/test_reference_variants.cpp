// The reference's attention variants (sliding window, softcap, ALiBi, sinks) against a naive loop written
// here from their definition (attention_variants.hpp), independently of reference/src: direct exp, no running
// max. Then the gradients (dq, dk, dv, d_sinks) against central finite differences of L = sum(dO * O), the
// input-precision references against the double ones, the varlen reference, and the argument checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "flashrtc_reference/varlen_reference.hpp"
#include "support/reference_problem.hpp"

using namespace flashrtc;
using flashrtc::reference::HostTensor;
using flashrtc::reference::Problem;
using flashrtc::testing::Inputs;
using flashrtc::testing::make_reference_problem;
using flashrtc::testing::Outputs;
using flashrtc::testing::OwnedTensor;
using flashrtc::testing::RefLayout;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// The reference (running max, Eigen products) and the naive loop (direct exp) agree up to rounding.
constexpr double kSameMathTolerance = 1e-12;

// Forward of the definition, one (b, h, i) at a time. o [B, Nq, Hq, d] row-major, lse [B, Hq, Nq].
void naive_forward(const Problem& p, const Inputs& in, std::vector<double>& o, std::vector<double>& lse) {
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  const std::int64_t diag = p.mask == MaskKind::kCausalTopLeft ? 0 : p.seqlen_kv - p.seqlen_q;
  o.assign(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads_q * p.head_dim), 0.0);
  lse.assign(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q), 0.0);
  const auto q = in.q.cview(), k = in.k.cview(), v = in.v.cview();
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
        const std::int64_t hk = h * p.heads_kv / p.heads_q;
        double denominator = p.sinks.empty() ? 0.0 : std::exp(p.sinks[h]);
        std::vector<double> weight(static_cast<std::size_t>(p.seqlen_kv), 0.0);
        for (std::int64_t j = 0; j < p.seqlen_kv; ++j) {
          const std::int64_t center = i + diag;
          if (p.mask != MaskKind::kNone && j > center) continue;
          if (p.window_left >= 0 && j < center - p.window_left) continue;
          if (p.window_right >= 0 && j > center + p.window_right) continue;
          double s = 0;
          for (std::int64_t d = 0; d < p.head_dim; ++d) s += q.at(b, i, h, d) * k.at(b, j, hk, d);
          s *= scale;
          if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
          if (!p.alibi_slopes.empty()) {
            const bool per_batch = static_cast<std::int64_t>(p.alibi_slopes.size()) == p.batch * p.heads_q;
            const double slope = p.alibi_slopes[(per_batch ? b * p.heads_q : 0) + h];
            s -= slope * std::abs(static_cast<double>(center - j));
          }
          weight[j] = std::exp(s);
          denominator += weight[j];
        }
        lse[(b * p.heads_q + h) * p.seqlen_q + i] = denominator > 0 ? std::log(denominator) : kNegInf;
        if (denominator == 0) continue;
        for (std::int64_t j = 0; j < p.seqlen_kv; ++j)
          for (std::int64_t d = 0; d < p.head_dim; ++d)
            o[((b * p.seqlen_q + i) * p.heads_q + h) * p.head_dim + d] +=
                weight[j] / denominator * v.at(b, j, hk, d);
      }
}

struct Compared {
  double o = 0, lse = 0;         // max abs difference (infinite where one side is and the other is not)
  std::int64_t masked_rows = 0;  // rows of the naive loop with lse -inf
};

Compared compare_with_naive(const Problem& p, std::uint32_t seed) {
  const Inputs in(p, RefLayout::kBhnd, seed);
  Outputs out(p);
  reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data());
  std::vector<double> o, lse;
  naive_forward(p, in, o, lse);
  Compared c;
  for (std::size_t x = 0; x < o.size(); ++x) c.o = std::max(c.o, std::fabs(out.o.values[x] - o[x]));
  for (std::size_t x = 0; x < lse.size(); ++x) {
    if (std::isinf(lse[x])) {
      ++c.masked_rows;
      if (out.lse[x] != lse[x]) c.lse = std::numeric_limits<double>::infinity();
    } else {
      c.lse = std::max(c.lse, std::fabs(out.lse[x] - lse[x]));
    }
  }
  if (std::any_of(out.o.values.begin(), out.o.values.end(), [](double x) { return std::isnan(x); }))
    c.o = std::numeric_limits<double>::infinity();
  return c;
}

std::vector<double> normal_vector(std::size_t n, std::uint32_t seed, double stddev = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, stddev);
  std::vector<double> x(n);
  for (double& e : x) e = normal(rng);
  return x;
}

std::string describe_variants(const Problem& p) {
  return testing::describe(p, RefLayout::kBhnd) + " window=(" + std::to_string(p.window_left) + "," +
         std::to_string(p.window_right) + ") softcap=" + std::to_string(p.softcap) +
         " slopes=" + std::to_string(p.alibi_slopes.size()) + " sinks=" + std::to_string(p.sinks.size());
}

}  // namespace

TEST_CASE("variants reference: windows under every mask and length order match the naive loop") {
  const std::pair<std::int64_t, std::int64_t> windows[] = {{-1, -1}, {2, -1}, {-1, 1}, {0, 0},
                                                           {3, 2},   {0, -1}, {-1, 0}};
  const std::pair<std::int64_t, std::int64_t> lengths[] = {{7, 7}, {5, 9}, {9, 5}};
  std::int64_t masked_rows = 0;
  for (MaskKind mask : testing::kAllMasks)
    for (const auto& [nq, nk] : lengths)
      for (const auto& [left, right] : windows) {
        Problem p = make_reference_problem(2, 2, 1, nq, nk, 8, mask);
        p.window_left = left;
        p.window_right = right;
        CAPTURE(describe_variants(p));
        const Compared c = compare_with_naive(p, 11);
        CHECK(c.o <= kSameMathTolerance);
        CHECK(c.lse <= kSameMathTolerance);
        masked_rows += c.masked_rows;
      }
  CHECK(masked_rows > 0);  // some rows see no key: the o = 0, lse = -inf path is exercised
}

TEST_CASE(
    "variants reference: a window wider than the sequence is no window; causal with right > 0 is right 0") {
  for (MaskKind mask : testing::kAllMasks) {
    const Problem plain = make_reference_problem(1, 2, 2, 6, 9, 8, mask);
    Problem wide = plain;
    wide.window_left = wide.window_right = 1000;
    const Inputs in(plain, RefLayout::kBnhd, 3);
    Outputs a(plain), b(plain);
    reference::forward(plain, in.q.cview(), in.k.cview(), in.v.cview(), a.o.view(), a.lse.data());
    reference::forward(wide, in.q.cview(), in.k.cview(), in.v.cview(), b.o.view(), b.lse.data());
    CHECK(a.o.values == b.o.values);
    CHECK(a.lse == b.lse);
    if (mask == MaskKind::kNone) continue;
    Problem right0 = plain, right3 = plain;
    right0.window_left = right3.window_left = 2;
    right0.window_right = 0;
    right3.window_right = 3;
    reference::forward(right0, in.q.cview(), in.k.cview(), in.v.cview(), a.o.view(), a.lse.data());
    reference::forward(right3, in.q.cview(), in.k.cview(), in.v.cview(), b.o.view(), b.lse.data());
    CHECK(a.o.values == b.o.values);
    CHECK(a.lse == b.lse);
  }
}

TEST_CASE("variants reference: rows with no visible key get o = 0 and lse = -inf, or lse = the sink") {
  // Bottom-right with Nq = 6 > Nk = 3 leaves rows 0..2 without keys; a window (0, 0) with Nq = 5 > Nk = 2
  // (mask none, diag -3) leaves rows 0..2 without keys too.
  Problem causal = make_reference_problem(1, 2, 1, 6, 3, 8, MaskKind::kCausalBottomRight);
  Problem window = make_reference_problem(1, 2, 1, 5, 2, 8, MaskKind::kNone);
  window.window_left = window.window_right = 0;
  for (Problem p : {causal, window})
    for (bool with_sinks : {false, true}) {
      if (with_sinks) p.sinks = {0.75, -1.5};
      CAPTURE(describe_variants(p));
      const Inputs in(p, RefLayout::kBnhd, 5);
      Outputs out(p);
      reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data());
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        for (std::int64_t i = 0; i < 3; ++i) {
          CHECK(out.lse[h * p.seqlen_q + i] == (with_sinks ? p.sinks[h] : kNegInf));
          for (std::int64_t d = 0; d < p.head_dim; ++d) CHECK(out.o.cview().at(0, i, h, d) == 0.0);
        }
      // The rows with keys: finite, and the naive loop's.
      for (std::int64_t h = 0; h < p.heads_q; ++h) CHECK(std::isfinite(out.lse[h * p.seqlen_q + 3]));
      const Compared c = compare_with_naive(p, 5);
      CHECK(c.o <= kSameMathTolerance);
      CHECK(c.lse <= kSameMathTolerance);
    }
}

TEST_CASE(
    "variants reference: softcap matches the naive loop; a huge softcap is no softcap; invalid ones throw") {
  for (double softcap : {0.7, 3.0, 30.0})
    for (MaskKind mask : testing::kAllMasks) {
      // Scale 1.5 makes raw scores of several units, where the cap bends them.
      Problem p = make_reference_problem(2, 2, 2, 5, 7, 8, mask, 1.5);
      p.softcap = softcap;
      CAPTURE(describe_variants(p));
      const Compared c = compare_with_naive(p, 7);
      CHECK(c.o <= kSameMathTolerance);
      CHECK(c.lse <= kSameMathTolerance);
    }
  const Problem plain = make_reference_problem(1, 2, 2, 5, 7, 8, MaskKind::kNone);
  Problem huge = plain;
  huge.softcap = 1e7;  // s - s^3 / (3 softcap^2): ~1e-14 for |s| of a few units
  const Inputs in(plain, RefLayout::kBnhd, 9);
  Outputs a(plain), b(plain);
  reference::forward(plain, in.q.cview(), in.k.cview(), in.v.cview(), a.o.view(), a.lse.data());
  reference::forward(huge, in.q.cview(), in.k.cview(), in.v.cview(), b.o.view(), b.lse.data());
  CHECK(testing::max_relative_difference(b.o.values, a.o.values) < 1e-11);
  CHECK(testing::max_relative_difference(b.lse, a.lse) < 1e-11);
  CHECK(b.o.values != a.o.values);  // the softcap ran

  for (double bad : {-1.0, -1e-30, std::nan(""), std::numeric_limits<double>::infinity()}) {
    Problem p = plain;
    p.softcap = bad;
    CAPTURE(bad);
    CHECK_THROWS_AS(reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), a.o.view(), a.lse.data()),
                    std::invalid_argument);
  }
}

TEST_CASE("variants reference: ALiBi per head and per batch and head match the naive loop") {
  for (MaskKind mask : testing::kAllMasks)
    for (bool per_batch : {false, true}) {
      Problem p = make_reference_problem(2, 4, 2, 6, 8, 8, mask);
      p.alibi_slopes = per_batch ? std::vector<double>{0.5, 0.25, 0.125, 0.0625, 1.0, 0.3, 0.05, 2.0}
                                 : std::vector<double>{0.5, 0.25, 0.125, 0.0625};
      CAPTURE(describe_variants(p));
      const Compared c = compare_with_naive(p, 13);
      CHECK(c.o <= kSameMathTolerance);
      CHECK(c.lse <= kSameMathTolerance);
    }
  // Per batch differs from per head where the second batch's slopes differ (the rows are really read).
  Problem head = make_reference_problem(2, 2, 2, 4, 4, 8, MaskKind::kNone);
  head.alibi_slopes = {0.5, 0.25};
  Problem batch = head;
  batch.alibi_slopes = {0.5, 0.25, 2.0, 1.0};
  const Inputs in(head, RefLayout::kBnhd, 1);
  Outputs a(head), b(head);
  reference::forward(head, in.q.cview(), in.k.cview(), in.v.cview(), a.o.view(), a.lse.data());
  reference::forward(batch, in.q.cview(), in.k.cview(), in.v.cview(), b.o.view(), b.lse.data());
  const std::size_t half = a.lse.size() / 2;
  CHECK(std::equal(a.lse.begin(), a.lse.begin() + half, b.lse.begin()));
  CHECK(!std::equal(a.lse.begin() + half, a.lse.end(), b.lse.begin() + half));
}

TEST_CASE("variants reference: sinks, and every variant at once with GQA, match the naive loop") {
  for (MaskKind mask : testing::kAllMasks)
    for (bool all : {false, true}) {
      Problem p = make_reference_problem(2, 4, 2, 7, 6, 8, mask);
      p.sinks = {0.3, -2.0, 1.7, 0.0};
      if (all) {
        p.window_left = 3;
        p.window_right = 1;
        p.softcap = 2.5;
        p.alibi_slopes = {0.5, 0.25, 0.125, 0.0625, 1.0, 0.3, 0.05, 2.0};
      }
      CAPTURE(describe_variants(p));
      const Compared c = compare_with_naive(p, 17);
      CHECK(c.o <= kSameMathTolerance);
      CHECK(c.lse <= kSameMathTolerance);
      CHECK(c.masked_rows == 0);  // with sinks no row's lse is -inf
    }
}

TEST_CASE("variants reference: invalid variants throw; forward_loops and forward_tiled refuse variants") {
  const Problem plain = make_reference_problem(2, 2, 1, 4, 4, 8, MaskKind::kNone);
  const Inputs in(plain, RefLayout::kBnhd, 2);
  Outputs out(plain);
  const std::vector<std::pair<const char*, std::function<void(Problem&)>>> invalid = {
      {"window_left -2", [](Problem& p) { p.window_left = -2; }},
      {"window_right -5", [](Problem& p) { p.window_right = -5; }},
      {"3 slopes for 2 heads",
       [](Problem& p) {
         p.alibi_slopes = {1, 2, 3};
       }},
      {"1 sink for 2 heads", [](Problem& p) { p.sinks = {1}; }},
  };
  for (const auto& [what, mutate] : invalid) {
    CAPTURE(what);
    Problem p = plain;
    mutate(p);
    CHECK_THROWS_AS(
        reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data()),
        std::invalid_argument);
  }
  const std::vector<std::pair<const char*, std::function<void(Problem&)>>> variants = {
      {"window", [](Problem& p) { p.window_left = 1; }},
      {"softcap", [](Problem& p) { p.softcap = 1; }},
      {"alibi",
       [](Problem& p) {
         p.alibi_slopes = {1, 2};
       }},
      {"sinks",
       [](Problem& p) {
         p.sinks = {1, 2};
       }},
  };
  for (const auto& [what, mutate] : variants) {
    CAPTURE(what);
    Problem p = plain;
    mutate(p);
    CHECK(p.has_variants());
    CHECK_THROWS_AS(
        reference::forward_loops(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), nullptr),
        std::invalid_argument);
    CHECK_THROWS_AS(
        reference::forward_tiled(p, 2, 2, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), nullptr),
        std::invalid_argument);
  }
  CHECK(!plain.has_variants());
}

namespace {

// Central differences of L = sum(dO * O) against the analytic gradients, for every entry of q, k, v and
// sinks.
struct FiniteDifferenceCase {
  Problem p;
  Inputs in;
  OwnedTensor dout;
  std::vector<double> sinks;

  FiniteDifferenceCase(const Problem& problem, std::uint32_t seed)
      : p(problem),
        in(problem, RefLayout::kBnhd, seed),
        dout(p.batch, p.seqlen_q, p.heads_q, p.head_dim, RefLayout::kBnhd) {
    std::mt19937 rng(seed + 1);
    dout.fill_normal(rng);
  }

  double loss() const {
    Outputs out(p);
    reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(), out.lse.data());
    double l = 0;
    for (std::size_t x = 0; x < out.o.values.size(); ++x) l += dout.values[x] * out.o.values[x];
    return l;
  }

  // max |analytic - fd| / (1 + |fd|) over x's entries, and max |fd| (the check is not vacuous).
  std::pair<double, double> check(std::vector<double>& x, const std::vector<double>& analytic) {
    constexpr double kStep = 1e-6;
    double worst = 0, largest = 0;
    for (std::size_t e = 0; e < x.size(); ++e) {
      const double saved = x[e];
      x[e] = saved + kStep;
      const double up = loss();
      x[e] = saved - kStep;
      const double down = loss();
      x[e] = saved;
      const double fd = (up - down) / (2 * kStep);
      worst = std::max(worst, std::fabs(analytic[e] - fd) / (1 + std::fabs(fd)));
      largest = std::max(largest, std::fabs(fd));
    }
    return {worst, largest};
  }
};

}  // namespace

TEST_CASE("variants reference: dq, dk, dv and d_sinks match central finite differences") {
  constexpr double kFdTolerance = 1e-6;
  struct Setup {
    const char* what;
    MaskKind mask;
    std::function<void(Problem&)> set;
  };
  const Setup setups[] = {
      {"softcap, window, causal", MaskKind::kCausalTopLeft,
       [](Problem& p) {
         p.softcap = 1.2;
         p.window_left = 2;
       }},
      {"ALiBi per batch, sinks, causal-br", MaskKind::kCausalBottomRight,
       [](Problem& p) {
         p.alibi_slopes = {0.5, 0.25, 0.125, 1.0};
         p.sinks = {0.4, -0.9};
       }},
      {"every variant, rows without keys", MaskKind::kNone,
       [](Problem& p) {
         p.window_left = 1;
         p.window_right = 0;
         p.softcap = 0.8;
         p.alibi_slopes = {0.3, 0.6};
         p.sinks = {-0.2, 1.1};
       }},
  };
  for (const Setup& s : setups) {
    // Nq = 6 > Nk = 4: bottom-right alignment leaves the first rows without keys.
    Problem p = make_reference_problem(2, 2, 1, 6, 4, 4, s.mask, 1.3);
    s.set(p);
    CAPTURE(s.what);
    FiniteDifferenceCase c(p, 23);
    Outputs fwd(p);
    reference::forward(p, c.in.q.cview(), c.in.k.cview(), c.in.v.cview(), fwd.o.view(), fwd.lse.data());
    OwnedTensor dq(p.batch, p.seqlen_q, p.heads_q, p.head_dim, RefLayout::kBnhd);
    OwnedTensor dk(p.batch, p.seqlen_kv, p.heads_kv, p.head_dim, RefLayout::kBnhd);
    OwnedTensor dv(p.batch, p.seqlen_kv, p.heads_kv, p.head_dim, RefLayout::kBnhd);
    std::vector<double> d_sinks(static_cast<std::size_t>(p.heads_q), std::nan(""));
    reference::backward(p, c.in.q.cview(), c.in.k.cview(), c.in.v.cview(), fwd.o.cview(), fwd.lse.data(),
                        c.dout.cview(), dq.view(), dk.view(), dv.view(), d_sinks.data());
    // Inputs were built in the bnhd layout, as the gradients: entry e of one is entry e of the other.
    for (auto [x, grad, name] :
         {std::tuple{&c.in.q, &dq, "dq"}, std::tuple{&c.in.k, &dk, "dk"}, std::tuple{&c.in.v, &dv, "dv"}}) {
      CAPTURE(name);
      const auto [worst, largest] = c.check(x->values, grad->values);
      CHECK(worst <= kFdTolerance);
      CHECK(largest > 1e-2);
    }
    if (p.sinks.empty()) {
      CHECK(std::isnan(d_sinks[0]));  // nothing to write: left alone
      continue;
    }
    const auto [worst, largest] = c.check(c.p.sinks, d_sinks);
    CHECK(worst <= kFdTolerance);
    CHECK(largest > 1e-3);
  }
}

TEST_CASE("variants reference: the fp32 input-precision forward and backward follow the double ones") {
  Problem p = make_reference_problem(2, 4, 2, 7, 9, 16, MaskKind::kCausalBottomRight, 0.9);
  p.window_left = 4;
  p.window_right = 1;
  p.softcap = 1.5;
  p.alibi_slopes = {0.5, 0.25, 0.125, 0.0625, 1.0, 0.3, 0.05, 2.0};
  p.sinks = {0.3, -2.0, 1.7, 0.0};
  const Inputs in(p, RefLayout::kBnhd, 31);
  Outputs ref(p), fp32(p);
  reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), ref.o.view(), ref.lse.data());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      reference::forward_head_input_precision(p, DType::kFloat32, b, h, in.q.cview(), in.k.cview(),
                                              in.v.cview(), fp32.o.view(), fp32.lse.data());
  // fp32 arithmetic on O(1) values of a few dozen terms.
  CHECK(testing::max_relative_difference(fp32.o.values, ref.o.values) < 1e-5);
  CHECK(testing::max_relative_difference(fp32.lse, ref.lse) < 1e-5);

  OwnedTensor dout(p.batch, p.seqlen_q, p.heads_q, p.head_dim, RefLayout::kBnhd);
  std::mt19937 rng(32);
  dout.fill_normal(rng);
  const auto gradients = [&](bool input_precision, std::vector<double>& d_sinks) {
    std::vector<OwnedTensor> g = {
        OwnedTensor(p.batch, p.seqlen_q, p.heads_q, p.head_dim, RefLayout::kBnhd),
        OwnedTensor(p.batch, p.seqlen_kv, p.heads_kv, p.head_dim, RefLayout::kBnhd),
        OwnedTensor(p.batch, p.seqlen_kv, p.heads_kv, p.head_dim, RefLayout::kBnhd)};
    d_sinks.assign(static_cast<std::size_t>(p.heads_q), std::nan(""));
    if (input_precision)
      reference::backward_input_precision(p, DType::kFloat32, in.q.cview(), in.k.cview(), in.v.cview(),
                                          ref.o.cview(), ref.lse.data(), dout.cview(), g[0].view(),
                                          g[1].view(), g[2].view(), d_sinks.data());
    else
      reference::backward(p, in.q.cview(), in.k.cview(), in.v.cview(), ref.o.cview(), ref.lse.data(),
                          dout.cview(), g[0].view(), g[1].view(), g[2].view(), d_sinks.data());
    return g;
  };
  std::vector<double> sinks_ref, sinks_fp32;
  const auto g_ref = gradients(false, sinks_ref);
  const auto g_fp32 = gradients(true, sinks_fp32);
  for (std::size_t x = 0; x < 3; ++x) {
    CAPTURE(x);
    CHECK(testing::max_relative_difference(g_fp32[x].values, g_ref[x].values) < 1e-5);
  }
  CHECK(testing::max_relative_difference(sinks_fp32, sinks_ref) < 1e-5);
  CHECK(std::all_of(sinks_ref.begin(), sinks_ref.end(), [](double x) { return x != 0 && std::isfinite(x); }));
}

namespace {

// A packed call: sequences of query lengths nq and key lengths nk, Hq = 2, Hkv = 1, d = 8.
struct PackedVariants {
  reference::VarlenProblem p;
  std::vector<double> q, k, v, o, lse;
  PackedVariants(const std::vector<std::int32_t>& nq, const std::vector<std::int32_t>& nk,
                 std::uint32_t seed) {
    p.cu_seqlens_q = {0};
    p.cu_seqlens_k = {0};
    for (std::size_t b = 0; b < nq.size(); ++b) {
      p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + nq[b]);
      p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + nk[b]);
    }
    p.heads_q = 2;
    p.heads_kv = 1;
    p.head_dim = 8;
    q = normal_vector(static_cast<std::size_t>(p.total_q() * 2 * 8), seed);
    k = normal_vector(static_cast<std::size_t>(p.total_k() * 8), seed + 1);
    v = normal_vector(static_cast<std::size_t>(p.total_k() * 8), seed + 2);
  }
  HostTensor<const double> view(const std::vector<double>& t, std::int64_t rows, std::int64_t heads) const {
    return HostTensor<const double>::bnhd(t.data(), rows, heads, p.head_dim);
  }
  void forward() {
    o.assign(q.size(), std::nan(""));
    lse.assign(static_cast<std::size_t>(p.heads_q * p.total_q()), std::nan(""));
    reference::forward_varlen(p, view(q, p.total_q(), 2), view(k, p.total_k(), 1), view(v, p.total_k(), 1),
                              HostTensor<double>::bnhd(o.data(), p.total_q(), 2, p.head_dim), lse.data());
  }
};

}  // namespace

TEST_CASE("variants reference: varlen runs each sequence with its own lengths and slopes") {
  // Sequence 1 has no keys: o = 0 and lse = the sink.
  PackedVariants c({3, 4, 5}, {5, 0, 2}, 41);
  c.p.mask = MaskKind::kCausalBottomRight;
  c.p.window_left = 1;
  c.p.softcap = 2.0;
  c.p.alibi_slopes = {0.5, 0.25, 1.0, 2.0, 0.1, 0.2};  // [batch, heads_q]
  c.p.sinks = {0.6, -0.4};
  c.forward();
  for (std::int64_t b = 0; b < c.p.batch(); ++b) {
    CAPTURE(b);
    // The sequence as a dense problem of batch 1, by the naive loop.
    const std::int64_t nq = c.p.length_q(b), nk = c.p.length_k(b), q0 = c.p.cu_seqlens_q[b],
                       k0 = c.p.cu_seqlens_k[b];
    if (nk == 0) {
      for (std::int64_t h = 0; h < 2; ++h)
        for (std::int64_t i = 0; i < nq; ++i) {
          CHECK(c.lse[h * c.p.total_q() + q0 + i] == c.p.sinks[h]);
          for (std::int64_t d = 0; d < 8; ++d) CHECK(c.o[((q0 + i) * 2 + h) * 8 + d] == 0.0);
        }
      continue;
    }
    Problem dense = make_reference_problem(1, 2, 1, nq, nk, 8, c.p.mask);
    dense.window_left = c.p.window_left;
    dense.softcap = c.p.softcap;
    dense.alibi_slopes = {c.p.alibi_slopes[b * 2], c.p.alibi_slopes[b * 2 + 1]};
    dense.sinks = c.p.sinks;
    Inputs in(dense, RefLayout::kBnhd, 0);
    std::copy_n(c.q.begin() + q0 * 16, nq * 16, in.q.values.begin());
    std::copy_n(c.k.begin() + k0 * 8, nk * 8, in.k.values.begin());
    std::copy_n(c.v.begin() + k0 * 8, nk * 8, in.v.values.begin());
    std::vector<double> o, lse;
    naive_forward(dense, in, o, lse);
    for (std::int64_t x = 0; x < nq * 16; ++x)
      CHECK(std::fabs(c.o[q0 * 16 + x] - o[x]) <= kSameMathTolerance);
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < nq; ++i)
        CHECK(std::fabs(c.lse[h * c.p.total_q() + q0 + i] - lse[h * nq + i]) <= kSameMathTolerance);
  }
}

TEST_CASE("variants reference: the varlen backward's d_sinks sums the sequences' (finite differences)") {
  PackedVariants c({3, 4, 2}, {5, 0, 3}, 51);
  c.p.mask = MaskKind::kCausalTopLeft;
  c.p.softcap = 1.5;
  c.p.sinks = {0.2, -0.7};
  c.forward();
  const std::vector<double> dout = normal_vector(c.o.size(), 52);
  std::vector<double> dq(c.q.size()), dk(c.k.size()), dv(c.v.size()), d_sinks(2, std::nan(""));
  const auto packed = [&](std::vector<double>& t, std::int64_t rows, std::int64_t heads) {
    return HostTensor<double>::bnhd(t.data(), rows, heads, 8);
  };
  const auto loss = [&] {
    c.forward();
    double l = 0;
    for (std::size_t x = 0; x < c.o.size(); ++x) l += dout[x] * c.o[x];
    return l;
  };
  const double base_loss = loss();
  CHECK(std::isfinite(base_loss));
  for (bool input_precision : {false, true}) {
    CAPTURE(input_precision);
    std::fill(d_sinks.begin(), d_sinks.end(), std::nan(""));
    reference::backward_varlen(
        c.p, c.view(c.q, c.p.total_q(), 2), c.view(c.k, c.p.total_k(), 1), c.view(c.v, c.p.total_k(), 1),
        c.view(c.o, c.p.total_q(), 2), c.lse.data(), c.view(dout, c.p.total_q(), 2),
        packed(dq, c.p.total_q(), 2), packed(dk, c.p.total_k(), 1), packed(dv, c.p.total_k(), 1),
        input_precision ? std::optional<DType>(DType::kFloat32) : std::nullopt, d_sinks.data());
    for (std::size_t h = 0; h < 2; ++h) {
      CAPTURE(h);
      constexpr double kStep = 1e-6;
      const double saved = c.p.sinks[h];
      c.p.sinks[h] = saved + kStep;
      const double up = loss();
      c.p.sinks[h] = saved - kStep;
      const double down = loss();
      c.p.sinks[h] = saved;
      c.forward();  // o and lse of the unperturbed sinks again
      const double fd = (up - down) / (2 * kStep);
      CHECK(std::fabs(fd) > 1e-3);
      CHECK(std::fabs(d_sinks[h] - fd) <= (input_precision ? 1e-5 : 1e-6) * (1 + std::fabs(fd)));
    }
  }
}

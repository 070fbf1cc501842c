// FlashAttention-2's blocked online softmax (running max, running sum, rescaled accumulator, exp2) against
// the reference: in double the algebra must agree to rounding for every tiling, including tiles of one
// element, ragged last tiles, block_m != block_n and blocks that a mask hides entirely.
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

// Same math, different association (blocked sums, exp2(x * log2 e) for exp(x)): rounding only.
constexpr double kTiledTolerance = 1e-12;

struct Tiling {
  int block_m, block_n;
};

struct Result {
  double o_error, lse_error;
};

Result tiled_vs_reference(const Problem& p, const Tiling& t, RefLayout layout, std::uint32_t seed) {
  const Inputs in(p, layout, seed);
  Outputs ref(p), tiled(p);
  reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), ref.o.view(), ref.lse.data());
  reference::forward_tiled(p, t.block_m, t.block_n, in.q.cview(), in.k.cview(), in.v.cview(), tiled.o.view(),
                           tiled.lse.data());
  return {testing::max_relative_difference(tiled.o.values, ref.o.values),
          testing::max_relative_difference(tiled.lse, ref.lse)};
}

Problem make_problem(MaskKind mask, std::int64_t seqlen_q, std::int64_t seqlen_kv, std::int64_t heads_q = 2,
                     std::int64_t heads_kv = 1, std::int64_t head_dim = 32) {
  return flashrtc::testing::make_reference_problem(1, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim, mask);
}

}  // namespace

TEST_CASE("tiled matches the reference: tile sizes x masks x lengths") {
  constexpr Tiling kTilings[] = {{1, 1},   {16, 16},  {64, 64}, {128, 128}, {16, 64},
                                 {64, 16}, {128, 16}, {1, 128}, {128, 1}};
  struct Lengths {
    std::int64_t q, kv;
  };
  constexpr Lengths kLengths[] = {{1, 1}, {17, 17}, {100, 100}, {17, 100}, {100, 17}, {1, 100}, {100, 1}};
  std::uint32_t seed = 100;
  for (MaskKind mask : testing::kAllMasks)
    for (const Tiling& t : kTilings)
      for (const Lengths& len : kLengths) {
        const Problem p = make_problem(mask, len.q, len.kv);
        const RefLayout layout = seed % 2 ? RefLayout::kBnhd : RefLayout::kBhnd;
        const Result r = tiled_vs_reference(p, t, layout, ++seed);
        INFO(testing::describe(p, layout) << " block_m=" << t.block_m << " block_n=" << t.block_n);
        CHECK(r.o_error < kTiledTolerance);
        CHECK(r.lse_error < kTiledTolerance);
      }
}

TEST_CASE("tiled matches the reference at length 1000 with ragged last tiles") {
  constexpr Tiling kTilings[] = {{64, 128}, {128, 64}, {16, 16}};
  std::uint32_t seed = 200;
  for (MaskKind mask : testing::kAllMasks)
    for (const Tiling& t : kTilings) {
      const Problem p = make_problem(mask, 1000, 1000, 1, 1, 64);
      const Result r = tiled_vs_reference(p, t, RefLayout::kBhnd, ++seed);
      INFO(testing::describe(p, RefLayout::kBhnd) << " block_m=" << t.block_m << " block_n=" << t.block_n);
      CHECK(r.o_error < kTiledTolerance);
      CHECK(r.lse_error < kTiledTolerance);
    }
  // Nq != Nk at this length, both ways, under the mask whose diagonal moves with the difference.
  for (const auto& [nq, nk] : {std::pair<std::int64_t, std::int64_t>{1000, 17}, {17, 1000}, {100, 1000}}) {
    const Problem p = make_problem(MaskKind::kCausalBottomRight, nq, nk, 4, 2, 32);
    const Result r = tiled_vs_reference(p, {64, 128}, RefLayout::kBnhd, ++seed);
    INFO(testing::describe(p, RefLayout::kBnhd));
    CHECK(r.o_error < kTiledTolerance);
    CHECK(r.lse_error < kTiledTolerance);
  }
}

TEST_CASE("fully masked rows and blocks give o = 0 and lse = -inf without NaN") {
  // Nq - Nk = 83 rows see no key; with block_m = 16 whole query blocks are hidden, with block_n = 16 most key
  // blocks are hidden from most rows, and the block holding row 82/83 mixes masked and visible rows.
  const Problem p = make_problem(MaskKind::kCausalBottomRight, 100, 17);
  for (const Tiling& t : {Tiling{16, 16}, Tiling{1, 1}, Tiling{128, 128}, Tiling{64, 1}}) {
    const Inputs in(p, RefLayout::kBnhd, 300);
    Outputs out(p);
    reference::forward_tiled(p, t.block_m, t.block_n, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(),
                             out.lse.data());
    const auto o = out.o.cview();
    INFO("block_m=" << t.block_m << " block_n=" << t.block_n);
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
        const bool hidden = i < p.seqlen_q - p.seqlen_kv;
        const double lse = out.lse[h * p.seqlen_q + i];
        CHECK((hidden ? lse == -std::numeric_limits<double>::infinity() : std::isfinite(lse)));
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          if (hidden)
            CHECK(o.at(0, i, h, d) == 0.0);
          else
            CHECK(std::isfinite(o.at(0, i, h, d)));
        }
      }
  }
}

TEST_CASE("the running max keeps exp2 finite when scores are far beyond exp's range") {
  // scale = 100 puts scores in the thousands: exp of an unshifted score overflows (or underflows) double, and
  // so would a max that is not carried across key blocks.
  Problem p = make_problem(MaskKind::kCausalTopLeft, 100, 100);
  p.scale = 100.0;
  for (const Tiling& t : {Tiling{16, 16}, Tiling{64, 1}, Tiling{1, 64}}) {
    const Result r = tiled_vs_reference(p, t, RefLayout::kBnhd, 400);
    INFO("block_m=" << t.block_m << " block_n=" << t.block_n);
    CHECK(r.o_error < kTiledTolerance);
    CHECK(r.lse_error < kTiledTolerance);
  }
}

TEST_CASE("block sizes below 1 are rejected") {
  const Problem p = make_problem(MaskKind::kNone, 17, 17);
  const Inputs in(p, RefLayout::kBnhd, 500);
  Outputs out(p);
  CHECK_THROWS_AS(reference::forward_tiled(p, 0, 16, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(),
                                           out.lse.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(reference::forward_tiled(p, 16, -1, in.q.cview(), in.k.cview(), in.v.cview(), out.o.view(),
                                           out.lse.data()),
                  std::invalid_argument);
}

// The backward kernels against the reference gradients over dtypes x head dims x masks x GQA x lengths x
// layouts (the default mode: at these lengths the two-kernel pipeline, but bwd-wgmma-split at d = 256 on
// sm_90a; test_backward_wgmma_main_gpu.cpp checks the fused kernels), the deterministic mode (same bits on every run),
// explicit tiles of the main kernel, and bad inputs (refused, nothing written).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "flashrtc/error.hpp"
#include "support/backward_case.hpp"

using namespace flashrtc;
using flashrtc::testing::BackwardCase;
using flashrtc::testing::BackwardShape;
using flashrtc::testing::check_backward_case;
using flashrtc::testing::Layout;
using flashrtc::testing::make_backward_case;

namespace {

constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr int kHeadDims[] = {32, 64, 96, 128, 256};
constexpr MaskKind kMasks[] = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};

// Hq/Hkv in {1, 4, Hq (MQA)}, lengths {1, 63, 129, 257}, Nq < Nk and Nq > Nk (rows without keys under the
// bottom-right mask), both layouts. Small: the suite stays under a minute with its CPU references.
constexpr BackwardShape kShapes[] = {
    {1, 2, 2, 63, 129, Layout::kBnhd}, {2, 8, 2, 129, 63, Layout::kBhnd}, {1, 3, 1, 257, 257, Layout::kBnhd},
    {1, 1, 1, 1, 1, Layout::kBhnd},    {1, 2, 1, 1, 257, Layout::kBnhd},
};

bool all_poisoned(const std::vector<unsigned char>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == 0xFF; });
}

}  // namespace

TEST_CASE("backward matches the reference: dtypes x head dims x masks x shapes") {
  // Each (dtype, head dim, mask) on two of the shapes, in rotation: every shape meets every mask and dtype.
  std::vector<BackwardCase> cases;
  int i = 0;
  for (DType dtype : kDtypes)
    for (int d : kHeadDims)
      for (MaskKind mask : kMasks) {
        for (int offset : {0, 2})
          cases.push_back(make_backward_case(dtype, d, mask, kShapes[(i + offset) % 5]));
        ++i;
      }
  for (DType dtype : kDtypes)
    for (MaskKind mask : kMasks) {  // padded views: strides beyond the rows, padding left untouched
      BackwardCase c = make_backward_case(dtype, 64, mask, {2, 4, 2, 100, 75, Layout::kBnhd});
      c.row_pad = 8;
      cases.push_back(c);
    }
  for (DType dtype : kDtypes)
    for (int d : {8, 40, 200}) {  // odd head dims and a negative scale
      BackwardCase c =
          make_backward_case(dtype, d, MaskKind::kCausalBottomRight, {1, 4, 2, 77, 65, Layout::kBhnd});
      c.scale = -0.3f;
      cases.push_back(c);
    }
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) check_backward_case(c);
}

TEST_CASE("deterministic mode: within tolerance, and the same bits on five runs") {
  std::vector<BackwardCase> cases;
  for (DType dtype : kDtypes)
    for (int d : {64, 128, 256})
      for (MaskKind mask : kMasks) {
        BackwardCase c = make_backward_case(dtype, d, mask, {2, 8, 2, 129, 200, Layout::kBnhd});
        c.deterministic = true;
        cases.push_back(c);
      }
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) {
    std::vector<flashrtc::testing::BackwardResult> runs;
    const auto result = flashrtc::testing::run_backward_case(c, 5, &runs);
    INFO(result.report);
    CHECK(result.pass);
    REQUIRE(runs.size() == 5);
    for (std::size_t run = 1; run < runs.size(); ++run) {
      INFO("run " << run << " against run 0");
      CHECK(runs[0].dq == runs[run].dq);
      CHECK(runs[0].dk == runs[run].dk);
      CHECK(runs[0].dv == runs[run].dv);
    }
  }
}

TEST_CASE("explicit tiles of the main kernel compute the same function") {
  // One stage and two, 1 to 8 warps, and the head dim split over 2 or 4 warps per 16 keys.
  const TileConfig tiles[] = {
      {16, 16, 1, 1}, {64, 32, 2, 1}, {32, 32, 8, 2}, {128, 64, 4, 1}, {16, 64, 8, 2}};
  std::vector<BackwardCase> cases;
  for (const TileConfig& tile : tiles)
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft}) {
      BackwardCase c = make_backward_case(DType::kBFloat16, 64, mask, {1, 4, 1, 150, 170, Layout::kBnhd});
      c.config = tile;
      cases.push_back(c);
    }
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) check_backward_case(c);
}

TEST_CASE("bad inputs: InvalidArgument naming the tensor, gradients untouched") {
  const BackwardCase c =
      make_backward_case(DType::kBFloat16, 64, MaskKind::kNone, {1, 2, 1, 63, 129, Layout::kBnhd});
  const auto in = flashrtc::testing::make_backward_inputs(c);
  flashrtc::testing::BackwardDevice dev(
      c, flashrtc::testing::encode(c.dtype, in.q.values), flashrtc::testing::encode(c.dtype, in.k.values),
      flashrtc::testing::encode(c.dtype, in.v.values), flashrtc::testing::encode(c.dtype, in.o.values),
      flashrtc::testing::encode(c.dtype, in.d_o.values), in.lse);
  const BackwardParams good = flashrtc::testing::backward_params(c, in, dev);
  struct Bad {
    const char* name;
    void (*spoil)(BackwardParams&);
  };
  const Bad bad[] = {
      {"d_o.stride_seq", [](BackwardParams& p) { p.d_o.stride_seq += 1; }},
      {"d_q.stride_dim", [](BackwardParams& p) { p.d_q.stride_dim = 2; }},
      {"d_k.data", [](BackwardParams& p) { p.d_k.data = nullptr; }},
      {"d_v.stride_head", [](BackwardParams& p) { p.d_v.stride_head = -8; }},
      {"lse is null", [](BackwardParams& p) { p.lse = nullptr; }},
      {"o.data=", [](BackwardParams& p) { p.o.data = static_cast<const char*>(p.o.data) + 2; }},
  };
  for (const Bad& b : bad) {
    INFO(b.name);
    dev.poison();
    BackwardParams p = good;
    b.spoil(p);
    try {
      attention_backward(p);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK(std::string(e.what()).find(b.name) != std::string::npos);
    }
    device_synchronize();
    CHECK(all_poisoned(flashrtc::testing::download(dev.dq_dev)));
    CHECK(all_poisoned(flashrtc::testing::download(dev.dk_dev)));
    CHECK(all_poisoned(flashrtc::testing::download(dev.dv_dev)));
  }
  // The same buffers with good parameters: every gradient written.
  dev.poison();
  attention_backward(good);
  device_synchronize();
  CHECK_FALSE(all_poisoned(flashrtc::testing::download(dev.dq_dev)));
}

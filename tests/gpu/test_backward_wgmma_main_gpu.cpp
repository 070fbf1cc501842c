// The Hopper backward main kernel (bwd-wgmma: dK and dV by TMA and wgmma) against the reference gradients:
// the head dims and dtypes it serves, every mask, GQA, odd lengths, both layouts, padded views and its own
// tile space. Every case needs an sm_90a GPU; elsewhere the suite reports them skipped.
#include <doctest/doctest.h>

#include <vector>

#include "flashrtc/flashrtc.hpp"
#include "gpu_requirements.hpp"
#include "support/backward_case.hpp"

using namespace flashrtc;
using flashrtc::testing::BackwardCase;
using flashrtc::testing::BackwardShape;
using flashrtc::testing::check_backward_case;
using flashrtc::testing::Layout;
using flashrtc::testing::make_backward_case;

namespace {

// GQA and MQA, Nq != Nk both ways (rows without keys under the bottom-right mask), lengths that are no
// multiple of any tile, a single row, and more query blocks than the ring has stages.
constexpr BackwardShape kShapes[] = {
    {1, 2, 2, 63, 129, Layout::kBnhd}, {2, 8, 2, 129, 63, Layout::kBhnd}, {1, 3, 1, 257, 257, Layout::kBnhd},
    {1, 1, 1, 1, 1, Layout::kBhnd},    {1, 2, 1, 1, 257, Layout::kBnhd},  {1, 4, 4, 600, 333, Layout::kBhnd},
};

constexpr MaskKind kMasks[] = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};

}  // namespace

TEST_CASE("the default backward main kernel on sm_90a is bwd-wgmma for d = 64, 96, 128, bwd-mma beyond" * FLASHRTC_NEEDS_SM90A) {
  BackwardParams p;
  p.batch = 1, p.seqlen_q = p.seqlen_kv = 256, p.heads_q = p.heads_kv = 2;
  alignas(16) static unsigned char dummy[16];
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int d : {64, 96, 128, 256}) {
      p.dtype = dtype, p.head_dim = d;
      p.q = p.k = p.v = p.o = p.d_o = p.d_q = p.d_k = p.d_v = TensorRef::bnhd(dummy, 256, 2, d);
      const ConfigResolution r =
          resolve_config(config_query(p, Operation::kBackward), *current_device_target());
      INFO(to_string(dtype) << " d=" << d);
      REQUIRE(r.family != nullptr);
      CHECK(r.family->name == (d <= 128 ? "bwd-wgmma" : "bwd-mma"));
    }
}

TEST_CASE("bwd-wgmma matches the reference: dtypes x head dims x masks x shapes" * FLASHRTC_NEEDS_SM90A) {
  std::vector<BackwardCase> cases;
  int i = 0;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int d : {64, 96, 128})
      for (MaskKind mask : kMasks) {
        for (int offset : {0, 2, 4})
          cases.push_back(make_backward_case(dtype, d, mask, kShapes[(i + offset) % 6]));
        ++i;
      }
  for (MaskKind mask : kMasks) {  // a padded view: strides beyond the rows, padding left untouched
    BackwardCase c = make_backward_case(DType::kBFloat16, 128, mask, {2, 4, 2, 100, 75, Layout::kBnhd});
    c.row_pad = 8;
    cases.push_back(c);
  }
  {  // a negative scale
    BackwardCase c = make_backward_case(DType::kFloat16, 64, MaskKind::kCausalBottomRight,
                                        {1, 4, 2, 77, 65, Layout::kBhnd});
    c.scale = -0.3f;
    cases.push_back(c);
  }
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) check_backward_case(c);
}

TEST_CASE("bwd-wgmma's own tiles compute the same function, with the same bits on two runs" * FLASHRTC_NEEDS_SM90A) {
  // Narrow and wide query steps, three consumer groups (192 keys), a three-stage ring.
  const TileConfig tiles[] = {{32, 128, 12, 2}, {48, 192, 16, 2}, {64, 128, 12, 3}, {80, 128, 12, 2}};
  std::vector<BackwardCase> cases;
  for (const TileConfig& tile : tiles)
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft}) {
      BackwardCase c = make_backward_case(DType::kBFloat16, 64, mask, {1, 4, 1, 300, 410, Layout::kBnhd});
      c.config = tile;
      c.deterministic = true;
      cases.push_back(c);
    }
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) {
    std::vector<flashrtc::testing::BackwardResult> runs;
    const auto result = flashrtc::testing::run_backward_case(c, 2, &runs);
    INFO(result.report);
    CHECK(result.pass);
    REQUIRE(runs.size() == 2);
    CHECK(runs[0].dk == runs[1].dk);
    CHECK(runs[0].dv == runs[1].dv);
  }
}

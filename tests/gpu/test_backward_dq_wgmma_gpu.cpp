// The Hopper (wgmma) dQ pass against the reference gradients: the family the dQ pass resolves to on sm_90a,
// dtypes x its head dims x masks x GQA x odd lengths x layouts, a padded view, its non-default tiles, and the
// same bits on two runs. Every case needs an sm_90a GPU; elsewhere the suite reports them skipped.
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

// GQA and MQA, Nq < Nk and Nq > Nk (rows without keys under the bottom-right mask), lengths 1, 63, 129, 257,
// several query blocks and key tiles, both layouts.
constexpr BackwardShape kShapes[] = {
    {1, 2, 2, 63, 129, Layout::kBnhd},  {2, 8, 2, 129, 63, Layout::kBhnd}, {1, 3, 1, 257, 257, Layout::kBnhd},
    {1, 1, 1, 1, 1, Layout::kBhnd},     {1, 2, 1, 1, 257, Layout::kBnhd},  {1, 4, 2, 300, 517, Layout::kBhnd},
    {1, 2, 1, 517, 300, Layout::kBnhd},
};
constexpr MaskKind kMasks[] = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};

}  // namespace

TEST_CASE("the dQ pass on sm_90a is bwd-dq-wgmma at d = 64, 96, 128 in fp16 and bf16" * FLASHRTC_NEEDS_SM90A) {
  const DeviceTarget target = current_device_target().value_or(no_device_target());
  alignas(16) static unsigned char dummy[16];
  static const float lse[1] = {0.f};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int d : {32, 64, 96, 128, 256}) {
      BackwardParams p;
      p.dtype = dtype, p.batch = 1, p.seqlen_q = p.seqlen_kv = 256, p.heads_q = p.heads_kv = 2,
      p.head_dim = d;
      p.q = p.k = p.v = p.o = p.d_o = p.d_q = p.d_k = p.d_v = TensorRef::bnhd(dummy, 256, 2, d);
      p.lse = lse;
      const ConfigResolution r = resolve_config(config_query(p, Operation::kBackwardDq), target);
      REQUIRE(r.family != nullptr);
      // Head dims off its grid fall back to the mma.sync pass.
      const bool served = d >= 64 && d <= 128;
      CHECK_MESSAGE(r.family->name == (served ? "bwd-dq-wgmma" : "bwd-dq-mma"), to_string(dtype)
                                                                                    << " d=" << d);
    }
}

TEST_CASE("bwd-dq-wgmma: dtypes x head dims x masks x shapes, a padded view" * FLASHRTC_NEEDS_SM90A) {
  std::vector<BackwardCase> cases;
  int i = 0;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int d : {64, 96, 128})
      for (MaskKind mask : kMasks) {
        // Three shapes per (dtype, head dim, mask), in rotation: every shape meets every mask and dtype.
        for (int offset : {0, 2, 4})
          cases.push_back(make_backward_case(dtype, d, mask, kShapes[(i + offset) % 7]));
        ++i;
      }
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (MaskKind mask : kMasks) {  // padded views: strides beyond the rows, padding left untouched
      BackwardCase c = make_backward_case(dtype, 128, mask, {2, 4, 2, 100, 75, Layout::kBnhd});
      c.row_pad = 8;
      cases.push_back(c);
    }
  BackwardCase negative = make_backward_case(DType::kBFloat16, 64, MaskKind::kCausalBottomRight,
                                             {1, 4, 2, 77, 65, Layout::kBhnd});
  negative.scale = -0.3f;
  cases.push_back(negative);
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) check_backward_case(c);
}

TEST_CASE("bwd-dq-wgmma: its non-default tiles compute the same function" * FLASHRTC_NEEDS_SM90A) {
  // One consumer group, key tiles of 32 to 128, three and four stages.
  const TileConfig tiles[] = {{64, 64, 8, 2},   {128, 32, 12, 3}, {128, 48, 12, 2},
                              {128, 96, 12, 2}, {128, 80, 12, 4}, {64, 128, 8, 2}};
  std::vector<BackwardCase> cases;
  for (const TileConfig& tile : tiles)
    for (int d : {64, 96, 128})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft}) {
        BackwardCase c = make_backward_case(DType::kBFloat16, d, mask, {1, 4, 1, 150, 370, Layout::kBnhd});
        c.dq_config = tile;
        if (!find_kernel_family("bwd-dq-wgmma")->check_config(c.dtype, d, tile, kSmemBytesSm90).empty())
          continue;
        cases.push_back(c);
      }
  REQUIRE(cases.size() >= 24);
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) check_backward_case(c);
}

TEST_CASE("bwd-dq-wgmma: deterministic, the same bits on two runs" * FLASHRTC_NEEDS_SM90A) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (MaskKind mask : kMasks) {
      BackwardCase c = make_backward_case(dtype, 128, mask, {2, 8, 2, 129, 200, Layout::kBnhd});
      c.deterministic = true;
      std::vector<flashrtc::testing::BackwardResult> runs;
      const auto result = flashrtc::testing::run_backward_case(c, 2, &runs);
      INFO(result.report);
      CHECK(result.pass);
      REQUIRE(runs.size() == 2);
      CHECK(runs[0].dq == runs[1].dq);
    }
}

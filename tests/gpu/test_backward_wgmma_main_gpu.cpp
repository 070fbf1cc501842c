// The Hopper backward main kernels against the reference gradients: the default call's bwd-wgmma-fused (dK,
// dV and dQ by TMA and wgmma, dQ reduce-added into an fp32 workspace) over the head dims and dtypes it
// serves, every mask, GQA, odd lengths, both layouts and padded views; its other tile; bwd-wgmma-split (the
// same at d = 256); and bwd-wgmma (deterministic calls) over its own tile space. Every case needs an sm_90a GPU; elsewhere the suite reports
// them skipped.
#include <doctest/doctest.h>

#include <array>
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

TEST_CASE(
    "the default backward on sm_90a: bwd-wgmma-fused for d = 64, 96, 128 from 4096 keys, bwd-wgmma when "
    "deterministic or shorter; bwd-wgmma-split for d = 256 at every length, bwd-mma when deterministic" *
    FLASHRTC_NEEDS_SM90A) {
  const DeviceTarget target = *current_device_target();
  BackwardParams p;
  p.batch = 1, p.seqlen_q = p.seqlen_kv = 4096, p.heads_q = p.heads_kv = 2;
  alignas(16) static unsigned char dummy[16];
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int d : {64, 96, 128, 256})
      for (bool deterministic : {false, true}) {
        p.dtype = dtype, p.head_dim = d, p.deterministic = deterministic;
        p.q = p.k = p.v = p.o = p.d_o = p.d_q = p.d_k = p.d_v = TensorRef::bnhd(dummy, 256, 2, d);
        INFO(to_string(dtype) << " d=" << d << (deterministic ? " deterministic" : ""));
        // As attention_backward resolves them: the operations for the call's traits, each its own family.
        const std::array<Operation, 3> ops =
            backward_operations(p, target.arch, config_query(p, Operation::kBackward).traits);
        const ConfigResolution main = resolve_config(config_query(p, ops[1]), target);
        const ConfigResolution dq = resolve_config(config_query(p, ops[2]), target);
        REQUIRE(main.family != nullptr);
        if (d > 128 && deterministic) {
          CHECK(main.family->name == "bwd-mma");
          CHECK(dq.family->name == "bwd-dq-mma");
        } else if (d > 128) {
          CHECK(main.family->name == "bwd-wgmma-split");
          CHECK(main.config == TileConfig{64, 64, 12, 2});
          CHECK(dq.family->name == "bwd-dq-convert");
          BackwardParams shorter = p;  // the alternative is bwd-mma: the fused kernel at every length
          shorter.seqlen_q = shorter.seqlen_kv = 512;
          CHECK(backward_operations(shorter, target.arch)[1] == Operation::kBackwardFused);
        } else if (deterministic) {
          CHECK(main.family->name == "bwd-wgmma");
          CHECK(dq.family->name == "bwd-dq-wgmma");
        } else {
          CHECK(main.family->name == "bwd-wgmma-fused");
          CHECK(main.config == TileConfig{64, 128, 12, 2});
          CHECK(dq.family->name == "bwd-dq-convert");
          BackwardParams shorter = p;  // the two kernels measured as fast below 2048 keys
          shorter.seqlen_q = shorter.seqlen_kv = 1024;
          CHECK(backward_operations(shorter, target.arch)[1] == Operation::kBackward);
        }
      }
}

// The fused kernel over short shapes, named by its default tile as an explicit config (without one these
// lengths take the two kernels); each default call is one of the two, whose kernels these suites both check.
TEST_CASE(
    "bwd-wgmma-fused (the default call's kernel from 2048 keys) matches the reference: dtypes x head dims x "
    "masks x shapes" *
    FLASHRTC_NEEDS_SM90A) {
  const TileConfig fused{64, 128, 12, 2};
  std::vector<BackwardCase> cases;
  const auto add = [&](BackwardCase c) {
    c.config = fused;
    cases.push_back(c);
  };
  int i = 0;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int d : {64, 96, 128})
      for (MaskKind mask : kMasks) {
        for (int offset : {0, 2, 4}) add(make_backward_case(dtype, d, mask, kShapes[(i + offset) % 6]));
        ++i;
      }
  for (MaskKind mask : kMasks) {  // a padded view: strides beyond the rows, padding left untouched
    BackwardCase c = make_backward_case(DType::kBFloat16, 128, mask, {2, 4, 2, 100, 75, Layout::kBnhd});
    c.row_pad = 8;
    add(c);
  }
  {  // a negative scale
    BackwardCase c = make_backward_case(DType::kFloat16, 64, MaskKind::kCausalBottomRight,
                                        {1, 4, 2, 77, 65, Layout::kBhnd});
    c.scale = -0.3f;
    add(c);
  }
  {  // the default call itself at 4096 keys (one head: the reference stays quick)
    BackwardCase c = make_backward_case(DType::kBFloat16, 64, MaskKind::kNone, {1, 1, 1, 130, 4096, Layout::kBnhd});
    cases.push_back(c);
  }
  BackwardParams call;
  call.dtype = DType::kBFloat16, call.head_dim = 64, call.seqlen_q = 130, call.seqlen_kv = 4096;
  REQUIRE(backward_operations(call, current_device_target()->arch)[1] == Operation::kBackwardFused);
  call.config = fused;
  call.seqlen_kv = 65;
  REQUIRE(backward_operations(call, current_device_target()->arch)[1] == Operation::kBackwardFused);
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) check_backward_case(c);
}

// d = 256 runs bwd-wgmma-split by default at every length (deterministic calls run bwd-mma, checked in
// test_backward_gpu).
TEST_CASE(
    "bwd-wgmma-split (the default call's kernel at d = 256) matches the reference: dtypes x masks x shapes" *
    FLASHRTC_NEEDS_SM90A) {
  std::vector<BackwardCase> cases;
  int i = 0;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (MaskKind mask : kMasks) {
      for (int offset : {0, 2, 4}) cases.push_back(make_backward_case(dtype, 256, mask, kShapes[(i + offset) % 6]));
      ++i;
    }
  for (MaskKind mask : kMasks) {  // a padded view: strides beyond the rows, padding left untouched
    BackwardCase c = make_backward_case(DType::kBFloat16, 256, mask, {2, 4, 2, 100, 75, Layout::kBnhd});
    c.row_pad = 8;
    cases.push_back(c);
  }
  {  // a negative scale, one Q buffer
    BackwardCase c = make_backward_case(DType::kFloat16, 256, MaskKind::kCausalBottomRight,
                                        {1, 4, 2, 77, 65, Layout::kBhnd});
    c.scale = -0.3f;
    c.config = TileConfig{64, 64, 12, 1};
    cases.push_back(c);
  }
  BackwardParams call;
  call.dtype = DType::kBFloat16, call.head_dim = 256, call.seqlen_q = call.seqlen_kv = 63;
  REQUIRE(backward_operations(call, current_device_target()->arch)[1] == Operation::kBackwardFused);
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) check_backward_case(c);
}

TEST_CASE("bwd-wgmma's own tiles compute the same function, with the same bits on two runs" *
          FLASHRTC_NEEDS_SM90A) {
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

// At d=128 three stages exceed the fused kernel's shared memory: such a call runs bwd-wgmma.
TEST_CASE("bwd-wgmma-fused's other tile, 64x128x12x3, matches the reference at d = 64 and 96" *
          FLASHRTC_NEEDS_SM90A) {
  const TileConfig tile{64, 128, 12, 3};
  std::vector<BackwardCase> cases;
  int i = 0;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int d : {64, 96}) {
      BackwardParams call;  // the explicit tile keeps the call on the fused kernel
      call.dtype = dtype, call.head_dim = d, call.config = tile;
      INFO(to_string(dtype) << " d=" << d);
      REQUIRE(backward_operations(call, current_device_target()->arch)[1] == Operation::kBackwardFused);
      for (MaskKind mask : kMasks) {
        BackwardCase c = make_backward_case(dtype, d, mask, kShapes[(i++) % 6]);
        c.config = tile;
        cases.push_back(c);
      }
    }
  flashrtc::testing::warm_backward_kernels(cases);
  for (const BackwardCase& c : cases) check_backward_case(c);
}

TEST_CASE("the fused and the deterministic backward of the same case both match the reference" *
          FLASHRTC_NEEDS_SM90A) {
  std::vector<BackwardCase> cases;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int d : {64, 128, 256})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight})
        for (bool deterministic : {false, true}) {
          BackwardCase c = make_backward_case(dtype, d, mask, {1, 4, 4, 600, 333, Layout::kBhnd});
          c.deterministic = deterministic;
          // The fused kernel at this length (d = 256: bwd-wgmma-split by default).
          if (!deterministic && d <= 128) c.config = TileConfig{64, 128, 12, 2};
          cases.push_back(c);
        }
  flashrtc::testing::warm_backward_kernels(cases);
  for (std::size_t i = 0; i < cases.size(); i += 2) {
    const auto fused = flashrtc::testing::run_backward_case(cases[i]);
    const auto deterministic = flashrtc::testing::run_backward_case(cases[i + 1]);
    INFO(fused.report);
    INFO(deterministic.report);
    CHECK(fused.pass);
    CHECK(deterministic.pass);
  }
}

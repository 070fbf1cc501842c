// Backward attention's main kernel on tensor cores (mma.sync m16n8k16, sm_80 and newer), fp16 and bf16:
// kernel_sources/flashrtc/attention_backward_mma.cuh; and its variable-length variant (varlen-bwd-mma), the
// same kernel template over the sequences of a packed call, with the same tiles.
#include "families/backward_launch.hpp"
#include "families/builtin_families.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/mma_backward_shape.cuh"

namespace flashrtc::detail {

namespace {

MmaBackwardShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "bwd-mma";
  f.operation = Operation::kBackward;
  f.dtypes = {DType::kFloat16, DType::kBFloat16};
  f.min_cc = 80;
  f.priority = 10;
  f.header = "flashrtc/attention_backward_mma.cuh";
  f.kernel_template = "flashrtc::attention_backward_mma";
  f.template_args =
      attention_template_args();  // the same list: <T, d, block_m, block_n, warps, stages, mask>
  f.tile_axes = {{16, 32, 64, 128}, {16, 32, 64, 128}, {1, 2, 4, 8}, {1, 2}};
  // Chosen by the register budget (dK, dV, S^T and dP^T accumulators per thread,
  // MmaBackwardShape::accumulator_floats) and shared memory, then `flashrtc tune --op bwd --space full` on an
  // H200 (bf16, B=2, H=16, N=4096; docs/performance-history.md) where it was run. Every default compiles without
  // spills and within kDefaultMaxRegisters (tests/cpu checks it).
  f.defaults = {
      {64,
       {{{64, 128, 8, 2}, 0, 0, 90, 90}, {{64, 64, 4, 2}}},
       "d<=64: sm_90 166 TFLOP/s (causal 132) against 64x64's 155 (131); 128x128 ran 175 (135) but spills; "
       "elsewhere 64x64 (128 accumulators), untimed"},
      {128,
       {{{32, 64, 4, 2}}},
       "d<=128: sm_90 165 TFLOP/s (causal 147); 64x64 and 64x128 ran 189-190 (154-155) with 254-255 "
       "registers, over the margin"},
      {256,
       {{{32, 64, 8, 2}}},
       "d<=256: two warps per 16 keys split the head dim (160 accumulators), 138 KB of shared memory; "
       "untimed"},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_backward_key_blocks_launch;
  return f;
}

}  // namespace

const KernelFamily& backward_mma_family() {
  static const KernelFamily family = describe();
  return family;
}

const KernelFamily& backward_varlen_mma_family() {
  static const KernelFamily family = [] {
    // The dense kernel's body per sequence, with its tiles and defaults, except where the sequence bounds in
    // registers push a default over the margin (tests/cpu/test_default_margin.cpp; registers from this build's
    // NVRTC 13.0.88): the same tiles with one stage there.
    KernelFamily f = describe();
    f.name = "varlen-bwd-mma";
    f.operation = Operation::kBackwardVarlen;
    f.template_args.push_back(TemplateArg::kVarlen);
    f.build_launch = build_varlen_backward_key_blocks_launch;
    for (KernelFamily::DefaultRow& row : f.defaults) {
      if (row.max_head_dim < 128) continue;
      const TileConfig two_stages = row.candidates.back().tile;
      TileConfig one_stage = two_stages;
      one_stage.stages = 1;
      row.candidates = {{one_stage, 0, 0, 100, 119}, {two_stages}};
      row.why += row.max_head_dim == 128
                     ? "; varlen: on sm_100 with two stages 252-254 registers (causal masks), with one 236-238"
                     : "; varlen: on sm_100 with two stages 252-254 registers (causal masks), with one 239-240";
    }
    return f;
  }();
  return family;
}

}  // namespace flashrtc::detail

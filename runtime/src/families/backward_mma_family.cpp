// Backward attention's main kernel on tensor cores (mma.sync m16n8k16, sm_80 and newer), fp16 and bf16:
// kernel_sources/flashrtc/attention_backward_mma.cuh.
#include "families/backward_launch.hpp"
#include "families/builtin_families.hpp"
#include "families/forward_launch.hpp"
#include "families/shape_rules.hpp"
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
      forward_block_template_args();  // the same list: <T, d, block_m, block_n, warps, stages, mask>
  f.tile_axes = {{16, 32, 64, 128}, {16, 32, 64, 128}, {1, 2, 4, 8}, {1, 2}};
  // Not yet timed on a GPU: chosen by the register budget (dK, dV, S^T and dP^T accumulators per thread,
  // MmaBackwardShape::accumulator_floats) and shared memory. Every default compiles without spills for sm_80
  // and sm_90a (tests/cpu checks it).
  f.defaults = {
      {64, {{{64, 64, 4, 2}}}, "d<=64: 128 accumulators; untimed"},
      {128, {{{32, 64, 4, 2}}}, "d<=128: 160 accumulators (64 query rows would be 192); untimed"},
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

}  // namespace flashrtc::detail

// The deterministic mode's dQ pass for Hopper (sm_90a): TMA, wgmma and warp specialization, fp16 and bf16:
// kernel_sources/flashrtc/attention_backward_dq_wgmma.cuh. Ranks above the mma.sync family on sm_90a; calls
// it cannot take (head dims off its grid, strides no TMA map describes) fall back to that family.
#include "families/backward_launch.hpp"
#include "families/builtin_families.hpp"
#include "families/forward_launch.hpp"
#include "families/shape_rules.hpp"
#include "flashrtc/wgmma_backward_dq_shape.cuh"

namespace flashrtc::detail {

namespace {

WgmmaBackwardDqShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

// Q and dO boxes are one consumer group's 64 rows; K and V boxes one key tile.
void build_launch(const CallPlan& plan, const void* op_params, LaunchShape& launch, KernelArgs& args) {
  build_backward_query_blocks_launch(plan, op_params, launch, args);
  push_backward_tensor_maps(op_params, args, shape(plan.spec).panel_bytes(), 64, plan.spec.tile.block_n);
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "bwd-dq-wgmma";
  f.operation = Operation::kBackwardDq;
  f.dtypes = {DType::kFloat16, DType::kBFloat16};
  f.min_cc = 90;
  f.max_cc = 90;
  f.needs_arch_specific = true;
  f.priority = 20;
  f.min_head_dim = 64;
  f.max_head_dim = 128;
  f.head_dim_multiple = 32;
  f.needs_traits = kCallTmaStrides;
  f.header = "flashrtc/attention_backward_dq_wgmma.cuh";
  f.kernel_template = "flashrtc::attention_backward_dq_wgmma";
  f.template_args = forward_block_template_args();
  f.tile_axes = {{64, 128}, {32, 48, 64, 80, 96, 128}, {8, 12}, {2, 3, 4}};
  // Not yet timed on a GPU: two consumer warp groups, K and V double buffered, the widest key tile whose dQ,
  // S, dP and dS fit 240 registers at every head dim without spills (d = 64 with 128 keys spills under a
  // causal mask).
  f.defaults = {
      {128, {{{128, 64, 12, 2}}}, "d<=128: 128x64, 144 accumulators at d=128; untimed"},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_launch;
  return f;
}

}  // namespace

const KernelFamily& backward_dq_wgmma_family() {
  static const KernelFamily family = describe();
  return family;
}

}  // namespace flashrtc::detail

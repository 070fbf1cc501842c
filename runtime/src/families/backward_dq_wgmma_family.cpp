// The deterministic mode's dQ pass for Hopper (sm_90a): TMA, wgmma and warp specialization, fp16 and bf16:
// kernel_sources/flashrtc/attention_backward_dq_wgmma.cuh. Ranks above the mma.sync family on sm_90a; calls
// it cannot take (head dims off its grid, strides no TMA map describes) fall back to that family. Its
// variable-length variant (varlen-bwd-dq-wgmma, Operation::kBackwardDqVarlen) is the same kernel template
// over the sequences of a packed call, with the same tiles, above varlen-bwd-dq-mma.
#include "families/backward_launch.hpp"
#include "families/builtin_families.hpp"
#include "families/hopper_rules.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
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

// The varlen kernel: one block per (sequence, query head, block_m queries of max_seqlen_q), maps over the
// packed tensors as one batch of total rows.
void build_varlen_launch(const CallPlan& plan, const void* op_params, LaunchShape& launch, KernelArgs& args) {
  build_varlen_backward_query_blocks_launch(plan, op_params, launch, args);
  push_varlen_backward_tensor_maps(op_params, args, shape(plan.spec).panel_bytes(), 64,
                                   plan.spec.tile.block_n);
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "bwd-dq-wgmma";
  f.operation = Operation::kBackwardDq;
  use_hopper_rules(f, 128);
  f.header = "flashrtc/attention_backward_dq_wgmma.cuh";
  f.kernel_template = "flashrtc::attention_backward_dq_wgmma";
  f.template_args = attention_template_args();
  f.tile_axes = {{64, 128}, {32, 48, 64, 80, 96, 128}, {8, 12}, {2, 3, 4}};
  // Two consumer warp groups, K and V in three stages, the widest key tile the tune on an H200 preferred that
  // fits 240 registers without spills under each mask (d = 64 with 128 keys spills under a causal mask).
  f.defaults = {
      {96,
       {{{128, 96, 12, 4}}},
       "d<=96 causal: bf16 d=64 N=4096 backward 249 TFLOP/s against 240 with three stages; 128x128 spills",
       {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}},
      {96,
       {{{128, 96, 12, 3}}},
       "d<=96: bf16 d=64 N=4096 B=4 H=32 backward 355 TFLOP/s against 280 with 128x64x12x2 (tune --op bwd "
       "--kernel dq --space full on an H200); d=96 untimed"},
      {128,
       {{{128, 96, 12, 3}}},
       "d=128: bf16 N=4096 B=4 H=16 backward 475 TFLOP/s against 378 with 128x64x12x2",
       {MaskKind::kNone}},
      {128,
       {{{128, 80, 12, 3}}},
       "d=128 causal: 128x96 spills 20 bytes under a causal mask; 128x80 ran 447 TFLOP/s unmasked"},
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

const KernelFamily& backward_dq_varlen_wgmma_family() {
  static const KernelFamily family = [] {
    // The dense kernel's body per sequence, with its tiles and defaults.
    KernelFamily f = describe();
    f.name = "varlen-bwd-dq-wgmma";
    f.operation = Operation::kBackwardDqVarlen;
    f.template_args.push_back(TemplateArg::kVarlen);
    f.build_launch = build_varlen_launch;
    return f;
  }();
  return family;
}

}  // namespace flashrtc::detail

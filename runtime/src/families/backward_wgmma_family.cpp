// Backward attention's main kernels for Hopper (sm_90a): TMA, wgmma and warp specialization, fp16 and bf16:
// kernel_sources/flashrtc/attention_backward_wgmma.cuh. bwd-wgmma (dK and dV) ranks above the mma.sync family
// on sm_90a; calls it cannot take (head dims other than 64, 96 and 128, strides no TMA map describes) fall
// back to that family. bwd-wgmma-fused also adds dQ into the fp32 workspace (Operation::kBackwardFused), and
// so does bwd-wgmma-split at head dim 256 (kernel_sources/flashrtc/attention_backward_wgmma_split.cuh).
// varlen-bwd-wgmma (Operation::kBackwardVarlen) and varlen-bwd-wgmma-fused (kBackwardFusedVarlen) are
// bwd-wgmma's and bwd-wgmma-fused's kernels over the sequences of a packed call, with the same tiles.

#include <string>
#include <utility>

#include "families/backward_launch.hpp"
#include "families/builtin_families.hpp"
#include "families/hopper_rules.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/wgmma_backward_shape.cuh"
#include "flashrtc/wgmma_backward_split_shape.cuh"

namespace flashrtc::detail {

namespace {

template <bool kFused>
WgmmaBackwardShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages, kFused};
}

WgmmaBackwardSplitShape split_shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

// One block per (batch, kv head, block_n keys), as the mma kernel's, and the four maps the kernel reads.
template <auto shape_of>
void build_launch(const CallPlan& plan, const void* op_params, LaunchShape& launch, KernelArgs& args) {
  build_backward_key_blocks_launch(plan, op_params, launch, args);
  push_backward_tensor_maps(op_params, args, shape_of(plan.spec).panel_bytes(), plan.spec.tile.block_m,
                            plan.spec.tile.block_n);
}

// The varlen kernels: one block per (sequence, kv head, block_n keys of max_seqlen_k), maps over the packed
// tensors as one batch of total rows.
template <auto shape_of>
void build_varlen_launch(const CallPlan& plan, const void* op_params, LaunchShape& launch, KernelArgs& args) {
  build_varlen_backward_key_blocks_launch(plan, op_params, launch, args);
  push_varlen_backward_tensor_maps(op_params, args, shape_of(plan.spec).panel_bytes(), plan.spec.tile.block_m,
                                   plan.spec.tile.block_n);
}

// A dense family's kernel over the sequences of a packed call (a sequence is a dense problem of its own
// lengths: the same tiles and defaults).
template <bool kFused>
KernelFamily varlen_of(KernelFamily f, std::string name, Operation operation) {
  f.name = std::move(name);
  f.operation = operation;
  f.template_args.push_back(TemplateArg::kVarlen);
  f.build_launch = build_varlen_launch<shape<kFused>>;
  return f;
}

// What both kernels of the header share: the Hopper rules, the template arguments, the launch.
template <bool kFused>
KernelFamily describe_common(std::string name, Operation operation, std::string kernel_template) {
  KernelFamily f;
  f.name = std::move(name);
  f.operation = operation;
  use_hopper_rules(f, 128);
  f.header = "flashrtc/attention_backward_wgmma.cuh";
  f.kernel_template = std::move(kernel_template);
  f.template_args = attention_template_args();  // <T, d, block_m, block_n, warps, stages, mask>
  use_shape_rules<shape<kFused>>(f);
  f.build_launch = build_launch<shape<kFused>>;
  return f;
}

KernelFamily describe() {
  KernelFamily f =
      describe_common<false>("bwd-wgmma", Operation::kBackward, "flashrtc::attention_backward_wgmma");
  f.tile_axes = {{32, 48, 64, 80, 96, 112, 128}, {128, 192}, {12, 16}, {2, 3}};
  // Two consumer warp groups of 64 keys; the widest query block whose S^T and dP^T fit beside dK and dV in
  // 232 registers without spills (ptxas for sm_90a), as `tune --op bwd --space full` on an H200 ranked them
  // (bf16, N=4096, B=4, H=2048/d; three-stage rings of the same tiles ran within 1%).
  f.defaults = {
      {64,
       {{{112, 128, 12, 2}}},
       "d=64: 348 TFLOP/s backward against 96x128's 333 (causal 243 against 218; 152 against 144 at N=1024); "
       "128 spills"},
      {128,
       {{{64, 128, 12, 2}}},
       "d=96 and d=128: 436 TFLOP/s backward at d=128 (64x128x12x3 431, 48x128 399)"},
  };
  return f;
}

KernelFamily describe_fused() {
  KernelFamily f = describe_common<true>("bwd-wgmma-fused", Operation::kBackwardFused,
                                         "flashrtc::attention_backward_wgmma_fused");
  f.tile_axes = {{64, 128}, {128}, {12}, {2, 3}};
  f.defaults = {
      {128, {{{64, 128, 12, 2}}}, "dQ's products take 64 queries; 128 queries spill S^T and dP^T"},
  };
  return f;
}

// Head dim 256: the two consumer groups split each pair's queries and the gradients' columns.
KernelFamily describe_split() {
  KernelFamily f;
  f.name = "bwd-wgmma-split";
  f.operation = Operation::kBackwardFused;
  use_hopper_rules(f, 256);
  f.min_head_dim = 256;
  f.header = "flashrtc/attention_backward_wgmma_split.cuh";
  f.kernel_template = "flashrtc::attention_backward_wgmma_split";
  f.template_args = attention_template_args();  // <T, d, block_m, block_n, warps, stages, mask>
  use_shape_rules<split_shape>(f);
  f.build_launch = build_launch<split_shape>;
  f.tile_axes = {{64}, {64}, {12}, {1, 2}};
  f.defaults = {
      {256,
       {{{64, 64, 12, 2}}},
       "the one tile whose K, V, Q, dO and dQ's chunks fit shared memory, Q double-buffered"},
  };
  return f;
}

}  // namespace

const KernelFamily& backward_wgmma_family() {
  static const KernelFamily family = describe();
  return family;
}

const KernelFamily& backward_varlen_wgmma_family() {
  static const KernelFamily family =
      varlen_of<false>(describe(), "varlen-bwd-wgmma", Operation::kBackwardVarlen);
  return family;
}

const KernelFamily& backward_varlen_wgmma_fused_family() {
  static const KernelFamily family =
      varlen_of<true>(describe_fused(), "varlen-bwd-wgmma-fused", Operation::kBackwardFusedVarlen);
  return family;
}

const KernelFamily& backward_wgmma_fused_family() {
  static const KernelFamily family = describe_fused();
  return family;
}

const KernelFamily& backward_wgmma_split_family() {
  static const KernelFamily family = describe_split();
  return family;
}

}  // namespace flashrtc::detail

// Forward attention on tensor cores (mma.sync m16n8k16, sm_80 and newer), fp16 and bf16:
// kernel_sources/flashrtc/attention_forward_mma.cuh.
#include "families/builtin_families.hpp"
#include "families/forward_launch.hpp"
#include "families/shape_rules.hpp"
#include "flashrtc/mma_forward_shape.cuh"

namespace flashrtc::detail {

namespace {

MmaForwardShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "mma";
  f.operation = Operation::kForward;
  f.dtypes = {DType::kFloat16, DType::kBFloat16};
  f.min_cc = 80;
  f.priority = 10;
  f.header = "flashrtc/attention_forward_mma.cuh";
  f.kernel_template = "flashrtc::attention_forward_mma";
  f.template_args = forward_block_template_args();
  f.tile_axes = {{32, 64, 128, 256}, {16, 32, 48, 64, 96, 128}, {2, 4, 8}, {1, 2}};
  // bf16 on an H200 at the standard grid's B = 16384 / N, H = 2048 / d, N = 4096 (docs/PERFORMANCE.md). 4 warps
  // of 32 query rows each, two blocks per SM, K and V double buffered. Every default compiles without spills
  // for its arch (tests/cpu checks sm_80 and sm_90a).
  f.defaults = {
      {32, {{{128, 64, 4, 2}}}, "d=32: the d=64 shape with fewer registers (189-203)"},
      {64,
       {{{128, 96, 4, 2}, kSmemBytesSm90, 1024}, {{128, 64, 4, 2}}},
       "d=64: 128x96 ran 326 TFLOP/s (causal 293), 128x64 323 (280); at N=512 128x96 ran 249 against "
       "sdpa-flash's 264 (96-key tiles waste 12.5% of the last pass at 512 keys)"},
      {96, {{{128, 64, 4, 2}}}, "d=96: 324 (causal 295); 128x48 ran 309 (276), 128x96 297 but spills"},
      {128,
       {{{128, 64, 4, 2}, kSmemBytesSm90}, {{128, 32, 4, 2}}},
       "d=128: 128x64 ran 372 (causal 323), 128x32 344 (293), 64x64 325; ptxas for sm_80 spills 128x64"},
      {256, {{{64, 32, 4, 2}}}, "d=256: 302; 64x64 with one stage ran 325 but spills 8 bytes"},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_forward_block_launch;
  return f;
}

}  // namespace

const KernelFamily& forward_mma_family() {
  static const KernelFamily family = describe();
  return family;
}

}  // namespace flashrtc::detail

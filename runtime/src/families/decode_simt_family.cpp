// Decode attention over a KV cache on CUDA cores (fp32 arithmetic, sm_80 and newer), every element type: the
// portable decode family, and fp32's: kernel_sources/flashrtc/attention_decode_simt.cuh.
#include "families/builtin_families.hpp"
#include "families/decode_launch.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/simt_decode_shape.cuh"

namespace flashrtc::detail {

namespace {

SimtDecodeShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "decode-simt";
  f.operation = Operation::kDecode;
  f.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  f.min_cc = 80;
  f.priority = 0;  // below decode-mma, which serves fp16 and bf16 on tensor cores
  f.header = "flashrtc/attention_decode_simt.cuh";
  f.kernel_template = "flashrtc::attention_decode_simt";
  f.template_args = attention_template_args();
  f.tile_axes = {{1, 2, 4, 8, 16}, {8, 16, 32, 64, 128}, {1, 2, 4, 8}, {1, 2}};
  // Lanes per row grow with the head dim (simt_decode_shape.cuh), so one tile shape holds at every head dim:
  // 4 packed rows, two keys per thread, the next tile's loads in flight, 100-170 registers (sm_80, sm_90a).
  // 8 rows took 252 registers with one stage.
  const std::vector<MaskKind> masks = {MaskKind::kNone, MaskKind::kCausalBottomRight};
  f.defaults = {
      {32, {{{4, 64, 4, 2}}}, "untimed: 4 lanes per row, 32 key groups of 2 keys", masks},
      {64, {{{4, 32, 4, 2}}}, "untimed: 8 lanes per row, 16 key groups of 2 keys", masks},
      {128, {{{4, 16, 4, 2}}}, "untimed: 16 lanes per row, 8 key groups of 2 keys", masks},
      {256, {{{4, 8, 4, 2}}}, "untimed: 32 lanes per row, 4 key groups of 2 keys", masks},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_decode_launch;
  return f;
}

}  // namespace

const KernelFamily& decode_simt_family() {
  static const KernelFamily family = describe();
  return family;
}

}  // namespace flashrtc::detail

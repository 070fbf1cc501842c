// Decode attention over a KV cache on tensor cores (mma.sync m16n8k16, sm_80 and newer), fp16 and bf16:
// kernel_sources/flashrtc/attention_decode_mma.cuh.
#include "families/builtin_families.hpp"
#include "families/decode_launch.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/mma_decode_shape.cuh"

namespace flashrtc::detail {

namespace {

MmaDecodeShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "decode-mma";
  f.operation = Operation::kDecode;
  f.dtypes = {DType::kFloat16, DType::kBFloat16};
  f.min_cc = 80;
  f.priority = 10;
  f.header = "flashrtc/attention_decode_mma.cuh";
  f.kernel_template = "flashrtc::attention_decode_mma";
  f.template_args = attention_template_args();
  f.tile_axes = {{16, 32, 64}, {32, 64, 128, 256}, {2, 4, 8}, {2, 3, 4}};
  f.defaults = {
      {128,
       {{{16, 64, 4, 2}}},
       "bf16 d=128 on an H200, B=1/8/128 with 32/8 heads: 4 warps over 64-key tiles with 2 stages (68 KB, 3 blocks "
       "per SM) ran 125/86/275 us against 131/95/308 with 3 stages and 115/93/334 with 128-key tiles and 8 warps",
       {MaskKind::kNone, MaskKind::kCausalBottomRight}},
      {256,
       {{{16, 32, 2, 2}}},
       "bf16 d=256, B=8, 32/8 heads, 8k keys on an H200: 2 warps over 32-key tiles, 2 stages (72 KB, 3 blocks per "
       "SM) ran 211 us against 231 with the d=128 tile (136 KB, one block per SM) and 225 with 3 stages",
       {MaskKind::kNone, MaskKind::kCausalBottomRight}},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_decode_launch;
  return f;
}

}  // namespace

const KernelFamily& decode_mma_family() {
  static const KernelFamily family = describe();
  return family;
}

}  // namespace flashrtc::detail

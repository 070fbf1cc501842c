// Forward attention on tensor cores (mma.sync m16n8k16, sm_80 and newer), fp16 and bf16:
// kernel_sources/flashrtc/attention_forward_mma.cuh; and its variable-length variant (varlen-mma), the same
// kernel template over the sequences of a packed call, with the same tiles.
#include "families/builtin_families.hpp"
#include "families/forward_launch.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
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
  // Windows and softcaps (docs/variants.md): the dense kernel compiles them in as its last template argument.
  f.template_args = attention_template_args();
  f.template_args.push_back(TemplateArg::kVariants);
  f.serves_variants = kVariantWindow | kVariantSoftcap;
  f.tile_axes = {{32, 64, 128, 256}, {16, 32, 48, 64, 96, 128}, {2, 4, 8}, {1, 2}};
  // bf16 on an H200 at the standard grid's B = 16384 / N, H = 2048 / d, N = 4096 (docs/performance-history.md). 4
  // warps of 32 query rows each, two blocks per SM, K and V double buffered. Every default compiles within
  // kDefaultMaxRegisters registers and without spills, fp16 and bf16, every mask, for each arch it applies to
  // (tests/cpu/test_default_margin.cpp: sm_80, sm_90a, sm_100, sm_120; registers below from this build's
  // NVRTC 13.0.88). The faster tiles that lost their place use 251-255 registers or spill.
  f.defaults = {
      {32, {{{128, 64, 4, 2}}}, "d=32: the d=64 shape with fewer registers (195-211)"},
      {64,
       {{{128, 64, 4, 2}}},
       "d=64: 128x64 ran 323 TFLOP/s (causal 280), 236-248 registers; 128x96 ran 326 (293) but uses 255 "
       "registers on sm_90a and spills on sm_80 and sm_100"},
      {96,
       {{{128, 48, 4, 2}}},
       "d=96: 128x48 ran 309 (causal 276), 241-246 registers; 128x64 ran 324 (295) at 251-255 everywhere"},
      {128,
       {{{128, 32, 4, 2}, 0, 0, 0, 90}, {{64, 64, 4, 2}}},
       "d=128: 128x32 ran 344 (causal 294), 244 registers up to sm_90a, 254 on sm_100 and sm_120, where "
       "64x64 (325, causal 311; 221-225) runs; 128x64 ran 372 (323) at 255 registers, spilling on sm_80 "
       "and sm_100"},
      {256,
       {{{64, 32, 4, 2}, 0, 0, 0, 90}, {{64, 48, 4, 2}, 0, 0, 100, 119}, {{64, 16, 4, 2}}},
       "d=256: 64x32 ran 304 (causal 270), 243-247 registers up to sm_90a but spills on sm_100 and uses "
       "255 on sm_120; sm_100 fits 64x48 (246; 254-255 elsewhere), sm_120 64x16 (243); 64x64 with one "
       "stage ran 323 but spills"},
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

const KernelFamily& forward_varlen_mma_family() {
  static const KernelFamily family = [] {
    // The dense kernel's body per sequence, with its tiles and defaults: a sequence is a dense problem of its
    // own lengths. The sequence's lengths live in registers where the dense kernel reads its own from the
    // parameters, so the defaults within a few registers of the margin move
    // (tests/cpu/test_default_margin.cpp holds these to it too; registers from this build's NVRTC 13.0.88).
    KernelFamily f = describe();
    f.name = "varlen-mma";
    f.operation = Operation::kForwardVarlen;
    f.template_args = attention_template_args();
    f.template_args.push_back(TemplateArg::kVarlen);
    f.serves_variants = 0;  // the varlen forward computes no variant yet
    f.build_launch = build_varlen_forward_launch;
    for (KernelFamily::DefaultRow& row : f.defaults) {
      if (row.max_head_dim == 64) {
        row.candidates = {{{128, 64, 4, 2}, 0, 0, 0, 90}, {{64, 64, 4, 2}}};
        row.why =
            "d=64: the dense default up to sm_90a; on sm_100 and sm_120 128x64 uses 252-254 registers with the "
            "sequence bounds, 64x64 153-166";
      } else if (row.max_head_dim == 256) {
        row.candidates.back().tile.stages = 1;
        row.why =
            "d=256: the dense defaults, with one stage where the dense kernel takes 64x16 (sm_120): 64x16 "
            "with two stages uses 249 registers with the sequence bounds (causal), with one 235-247";
      }
    }
    return f;
  }();
  return family;
}

}  // namespace flashrtc::detail

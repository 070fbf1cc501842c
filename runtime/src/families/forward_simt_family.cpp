// Forward attention on CUDA cores (exact fp32 arithmetic), fp32:
// kernel_sources/flashrtc/attention_forward_simt.cuh; and its variable-length variant (varlen-simt), the same
// kernel template over the sequences of a packed call, with the same tiles.
#include "families/builtin_families.hpp"
#include "families/forward_launch.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/simt_forward_shape.cuh"

namespace flashrtc::detail {

namespace {

SimtForwardShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "simt";
  f.operation = Operation::kForward;
  f.dtypes = {DType::kFloat32};
  f.min_cc = 80;
  f.priority = 0;
  f.header = "flashrtc/attention_forward_simt.cuh";
  f.kernel_template = "flashrtc::attention_forward_simt";
  f.template_args = attention_template_args();
  f.tile_axes = {{16, 32, 64, 128}, {16, 32, 64, 128}, {2, 4, 8}, {1, 2}};
  // fp32, B=2 H=16 N=4096 on an H200 (docs/performance-history.md). Every default compiles within
  // kDefaultMaxRegisters registers and without spills, every mask, for each arch it applies to
  // (tests/cpu/test_default_margin.cpp: sm_80, sm_90a, sm_100, sm_120; registers below from this build's
  // NVRTC 13.0.88).
  f.defaults = {
      {32,
       {{{64, 64, 4, 1}}},
       "d=32: 29 TFLOP/s, 168-212 registers; 128x64 ran 31 at 254 registers everywhere, 8 warps 19-25 (too "
       "few columns per thread)"},
      {64,
       {{{64, 64, 4, 1}}},
       "d=64: 35 TFLOP/s; 128x64 ran 36, passed over while this family also built 16-bit tiles (they spilled "
       "it)"},
      {128,
       {{{64, 32, 4, 1}}},
       "d=128: 64x32 ran 34, 167-230 registers; 128x64 ran 39 at 250-254 registers (and needs 170 KB, over "
       "sm_80's 163 KB)"},
      {256,
       {{{64, 64, 8, 1}, 0, 0, 100}, {{64, 32, 8, 1}}},
       "d=256: 64x64 ran 33 and needs 217 KB, 236 registers on sm_100 but 254 on sm_90a; 64x32 ran 28 "
       "(168-240); larger tiles pass 128 accumulators"},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_forward_block_launch;
  return f;
}

}  // namespace

const KernelFamily& forward_simt_family() {
  static const KernelFamily family = describe();
  return family;
}

const KernelFamily& forward_varlen_simt_family() {
  static const KernelFamily family = [] {
    // The dense kernel's body per sequence, with its tiles and defaults: a sequence is a dense problem of its
    // own lengths (tests/cpu/test_default_margin.cpp holds the defaults to the register margin here too).
    KernelFamily f = describe();
    f.name = "varlen-simt";
    f.operation = Operation::kForwardVarlen;
    f.template_args.push_back(TemplateArg::kVarlen);
    f.build_launch = build_varlen_forward_launch;
    return f;
  }();
  return family;
}

}  // namespace flashrtc::detail

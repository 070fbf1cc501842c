// The deterministic mode's dQ pass on tensor cores (mma.sync m16n8k16, sm_80 and newer), fp16 and bf16:
// kernel_sources/flashrtc/attention_backward_dq_mma.cuh; and its variable-length variant (varlen-bwd-dq-mma),
// the same kernel template over the sequences of a packed call, with the same tiles.
#include "families/backward_launch.hpp"
#include "families/builtin_families.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/mma_backward_shape.cuh"

namespace flashrtc::detail {

namespace {

MmaBackwardDqShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "bwd-dq-mma";
  f.operation = Operation::kBackwardDq;
  f.dtypes = {DType::kFloat16, DType::kBFloat16};
  f.min_cc = 80;
  f.priority = 10;
  f.header = "flashrtc/attention_backward_dq_mma.cuh";
  f.kernel_template = "flashrtc::attention_backward_dq_mma";
  f.template_args = attention_template_args();
  f.tile_axes = {{16, 32, 64, 128}, {16, 32, 64, 128}, {1, 2, 4, 8}, {1, 2}};
  // Not yet timed on a GPU: chosen by the register budget (dQ, S and dP accumulators per thread,
  // MmaBackwardDqShape::accumulator_floats). Every default compiles without spills for sm_80 and sm_90a.
  f.defaults = {
      {128, {{{64, 64, 4, 2}}}, "d<=128: at most 128 accumulators; untimed"},
      {256, {{{64, 32, 4, 2}}}, "d<=256: 160 accumulators, 133 KB of shared memory; untimed"},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_backward_query_blocks_launch;
  return f;
}

}  // namespace

const KernelFamily& backward_dq_mma_family() {
  static const KernelFamily family = describe();
  return family;
}

const KernelFamily& backward_dq_varlen_mma_family() {
  static const KernelFamily family = [] {
    // The dense kernel's body per sequence, with its tiles and defaults, except where the sequence bounds in
    // registers push a default over the margin on sm_90a (tests/cpu/test_default_margin.cpp; registers from
    // this build's NVRTC 13.0.88).
    KernelFamily f = describe();
    f.name = "varlen-bwd-dq-mma";
    f.operation = Operation::kBackwardDqVarlen;
    f.template_args.push_back(TemplateArg::kVarlen);
    f.build_launch = build_varlen_backward_query_blocks_launch;
    for (KernelFamily::DefaultRow& row : f.defaults) {
      const TileConfig dense = row.candidates.back().tile;
      if (row.max_head_dim == 128) {
        row.candidates = {{{dense.block_m, dense.block_n, dense.warps, 1}, 0, 0, 90, 90}, {dense}};
        row.why += "; varlen: on sm_90a 254 registers (causal-br), with one stage 238-240";
      } else {
        row.candidates = {{{dense.block_m, 16, dense.warps, dense.stages}, 0, 0, 90, 90}, {dense}};
        row.why += "; varlen: on sm_90a 250 registers (causal-br; one stage: 249 causal), 64x16 242-244";
      }
    }
    return f;
  }();
  return family;
}

}  // namespace flashrtc::detail

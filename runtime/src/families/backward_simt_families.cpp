// Backward attention on CUDA cores (exact fp32 arithmetic), fp32: the main kernel and the deterministic
// mode's dQ pass, kernel_sources/flashrtc/attention_backward_simt.cuh.
#include "families/backward_launch.hpp"
#include "families/builtin_families.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/simt_backward_shape.cuh"

namespace flashrtc::detail {

namespace {

template <bool kDq>
SimtBackwardShapeOf<kDq> shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

KernelFamily describe_common() {
  KernelFamily f;
  f.dtypes = {DType::kFloat32};
  f.min_cc = 80;
  f.priority = 0;
  f.header = "flashrtc/attention_backward_simt.cuh";
  f.template_args = attention_template_args();
  f.tile_axes = {{8, 16, 32, 64, 128}, {8, 16, 32, 64, 128}, {1, 2, 4, 8}, {1}};
  return f;
}

}  // namespace

const KernelFamily& backward_simt_family() {
  static const KernelFamily family = [] {
    KernelFamily f = describe_common();
    f.name = "bwd-simt";
    f.operation = Operation::kBackward;
    f.kernel_template = "flashrtc::attention_backward_simt";
    // Not yet timed on a GPU: 32 keys per block keep dK and dV at 64 floats per thread or fewer, and the
    // tiles within sm_80's shared memory (139 KB at d = 256). Every default compiles without spills
    // (tests/cpu).
    f.defaults = {
        {128, {{{32, 32, 4, 1}}}, "d<=128: at most 64 accumulators per thread; untimed"},
        {256, {{{32, 32, 8, 1}}}, "d<=256: 8 warps keep 64 accumulators per thread; untimed"},
    };
    use_shape_rules<shape<false>>(f);
    f.build_launch = build_backward_key_blocks_launch;
    return f;
  }();
  return family;
}

const KernelFamily& backward_dq_simt_family() {
  static const KernelFamily family = [] {
    KernelFamily f = describe_common();
    f.name = "bwd-dq-simt";
    f.operation = Operation::kBackwardDq;
    f.kernel_template = "flashrtc::attention_backward_dq_simt";
    f.defaults = {
        {128, {{{32, 32, 4, 1}}}, "d<=128: at most 32 accumulators per thread; untimed"},
        {256, {{{32, 32, 8, 1}}}, "d<=256: 8 warps keep 32 accumulators per thread; untimed"},
    };
    use_shape_rules<shape<true>>(f);
    f.build_launch = build_backward_query_blocks_launch;
    return f;
  }();
  return family;
}

}  // namespace flashrtc::detail

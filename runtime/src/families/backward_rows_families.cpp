// The backward's row passes, every element type: the pre-pass D = rowsum(dO * O) and the conversion of the
// fp32 dQ workspace into d_q (varlen-bwd-dq-convert: a packed call's):
// kernel_sources/flashrtc/backward_rows.cuh.
#include "families/backward_launch.hpp"
#include "families/builtin_families.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/rows_shape.cuh"

namespace flashrtc::detail {

namespace {

RowsShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

KernelFamily describe(std::string name, Operation operation, std::string kernel_template,
                      void (*build_launch)(const CallPlan&, const void*, LaunchShape&, KernelArgs&)) {
  KernelFamily f;
  f.name = std::move(name);
  f.operation = operation;
  f.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  f.min_cc = 80;
  f.header = "flashrtc/backward_rows.cuh";
  f.kernel_template = std::move(kernel_template);
  f.template_args = backward_rows_template_args();
  // block_m rows per block; block_n and stages are 1 (no key tile, no pipeline).
  f.tile_axes = {{4, 8, 16, 32, 64}, {1}, {1, 2, 4, 8}, {1}};
  f.defaults = {{256, {{{16, 1, 4, 1}}}, "memory-bound, one warp per row: 4 rows per warp; untimed"}};
  use_shape_rules<shape>(f);
  f.build_launch = build_launch;
  return f;
}

}  // namespace

const KernelFamily& backward_varlen_dq_convert_family() {
  static const KernelFamily family = [] {
    KernelFamily f =
        describe("varlen-bwd-dq-convert", Operation::kBackwardDqConvertVarlen,
                 "flashrtc::attention_backward_dq_convert", build_varlen_backward_dq_convert_launch);
    f.template_args.push_back(TemplateArg::kVarlen);
    return f;
  }();
  return family;
}

const KernelFamily& backward_prep_family() {
  static const KernelFamily family = describe(
      "bwd-prep", Operation::kBackwardPrep, "flashrtc::attention_backward_prep", build_backward_rows_launch);
  return family;
}

const KernelFamily& backward_dq_convert_family() {
  static const KernelFamily family =
      describe("bwd-dq-convert", Operation::kBackwardDqConvert, "flashrtc::attention_backward_dq_convert",
               build_backward_dq_convert_launch);
  return family;
}

}  // namespace flashrtc::detail

// The KV-cache row kernels, every element type: the append of new keys into the cache (kv_append.cuh), the
// combine of a decode call's key splits (decode_combine.cuh) and merge_states (merge_states.cuh).
#include "families/builtin_families.hpp"
#include "families/decode_launch.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/combine_shape.cuh"
#include "flashrtc/rows_shape.cuh"

namespace flashrtc::detail {

namespace {

template <typename Shape>
Shape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

template <typename Shape>
KernelFamily describe(std::string name, Operation operation, std::string header, std::string kernel_template,
                      void (*build_launch)(const CallPlan&, const void*, LaunchShape&, KernelArgs&),
                      KernelFamily::DefaultRow defaults = {
                          256, {{{16, 1, 4, 1}}}, "memory-bound, one warp per row: 4 rows per warp; untimed"}) {
  KernelFamily f;
  f.name = std::move(name);
  f.operation = operation;
  f.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  f.min_cc = 80;
  f.header = std::move(header);
  f.kernel_template = std::move(kernel_template);
  f.template_args = backward_rows_template_args();
  // block_m rows per block; block_n and stages are 1 (no key tile, no pipeline).
  f.tile_axes = {{1, 2, 4, 8, 16, 32, 64}, {1}, {1, 2, 4, 8}, {1}};
  f.defaults = {std::move(defaults)};
  use_shape_rules<shape<Shape>>(f);
  f.build_launch = build_launch;
  return f;
}

}  // namespace

const KernelFamily& kv_append_family() {
  static const KernelFamily family = describe<RowsShape>("kv-append", Operation::kKvAppend, "flashrtc/kv_append.cuh",
                                              "flashrtc::kv_append", build_kv_append_launch);
  return family;
}

const KernelFamily& decode_combine_family() {
  // One row per block, its splits shared out over 4 warps: on an H200, B = 1 with 32 query heads and 43 splits
  // of 64k keys took 52 us with 16 rows per block one warp each (2 blocks), each warp's split loads in turn.
  static const KernelFamily family = describe<CombineShape>(
      "decode-combine", Operation::kDecodeCombine, "flashrtc/decode_combine.cuh", "flashrtc::decode_combine",
      build_decode_combine_launch, {256, {{{1, 1, 4, 1}}}, "one row per block, 4 warps over its splits"});
  return family;
}

const KernelFamily& merge_states_family() {
  static const KernelFamily family = describe<RowsShape>("merge-states", Operation::kMergeStates, "flashrtc/merge_states.cuh",
                                              "flashrtc::merge_states", build_merge_states_launch);
  return family;
}

}  // namespace flashrtc::detail

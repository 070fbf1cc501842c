// Forward attention for Hopper (sm_90a): TMA, wgmma and warp specialization, fp16 and bf16:
// kernel_sources/flashrtc/attention_forward_wgmma.cuh. Ranks above the mma.sync family on sm_90a; calls it
// cannot take (head dims off its grid, strides no TMA map describes) fall back to that family.
#include <algorithm>
#include <cstdint>

#include "families/builtin_families.hpp"
#include "families/forward_launch.hpp"
#include "families/shape_rules.hpp"
#include "flashrtc/attention.hpp"
#include "flashrtc/wgmma_forward_shape.cuh"
#include "tensor_map.hpp"

namespace flashrtc::detail {

namespace {

WgmmaForwardShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages};
}

// The map of a [batch, seq, head, dim] tensor as (dim, seq, head, batch), a box being one swizzle panel of
// `rows` rows (the kernel's contract, attention_forward_wgmma.cuh). A stride of a single-index dimension is
// never followed; it is given a valid value.
CUtensorMap tensor_map(const TensorRef& t, DType dtype, std::int64_t seqlen, std::int64_t heads, std::int64_t batch,
                       int head_dim, int rows, const WgmmaForwardShape& s) {
  const std::uint64_t bytes = dtype_size(dtype);
  const auto stride = [&](std::int64_t extent, std::int64_t elements) -> std::uint64_t {
    return extent > 1 ? static_cast<std::uint64_t>(elements) * bytes : 16u;
  };
  TensorMapSpec spec;
  spec.dtype = dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  spec.rank = 4;
  spec.global_address = t.data;
  spec.global_dims[0] = static_cast<std::uint64_t>(head_dim);
  spec.global_dims[1] = static_cast<std::uint64_t>(seqlen);
  spec.global_dims[2] = static_cast<std::uint64_t>(heads);
  spec.global_dims[3] = static_cast<std::uint64_t>(batch);
  spec.global_strides_bytes[0] = stride(seqlen, t.stride_seq);
  spec.global_strides_bytes[1] = stride(heads, t.stride_head);
  spec.global_strides_bytes[2] = stride(batch, t.stride_batch);
  spec.box_dims[0] = static_cast<std::uint32_t>(s.panel_elements());
  spec.box_dims[1] = static_cast<std::uint32_t>(rows);
  spec.box_dims[2] = 1;
  spec.box_dims[3] = 1;
  spec.swizzle = s.panel_bytes() == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  spec.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  spec.oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;  // zeros past the end: masked keys read as 0
  return encode_tensor_map(spec);
}

// Persistent or one block per work tile, as the kernel is built for the mask (wgmma_forward_shape.cuh).
void build_launch(const CallPlan& plan, const void* op_params, LaunchShape& launch, KernelArgs& args) {
  const ForwardParams& p = *static_cast<const ForwardParams*>(op_params);
  const kernel::ForwardParams k = forward_kernel_params(plan, p);
  const bool persistent = wgmma_forward_persistent(static_cast<int>(p.mask)) && plan.multiprocessors > 0;
  launch.grid[0] = static_cast<unsigned>(persistent ? std::min(k.num_blocks, plan.multiprocessors) : k.num_blocks);
  launch.block[0] = static_cast<unsigned>(plan.threads);
  launch.dynamic_smem_bytes = static_cast<unsigned>(plan.smem_bytes);
  args.push(k);
  const WgmmaForwardShape s = shape(plan.spec);
  const int d = static_cast<int>(p.head_dim);
  args.push(tensor_map(p.q, p.dtype, p.seqlen_q, p.heads_q, p.batch, d, 64, s));
  args.push(tensor_map(p.k, p.dtype, p.seqlen_kv, p.heads_kv, p.batch, d, plan.spec.tile.block_n, s));
  args.push(tensor_map(p.v, p.dtype, p.seqlen_kv, p.heads_kv, p.batch, d, plan.spec.tile.block_n, s));
  args.push(tensor_map(p.o, p.dtype, p.seqlen_q, p.heads_q, p.batch, d, 64, s));
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "wgmma";
  f.operation = Operation::kForward;
  f.dtypes = {DType::kFloat16, DType::kBFloat16};
  f.min_cc = 90;
  f.max_cc = 90;
  f.needs_arch_specific = true;
  f.priority = 20;
  f.min_head_dim = 64;
  f.max_head_dim = 256;
  f.head_dim_multiple = 32;
  f.needs_traits = kCallTmaStrides;
  f.header = "flashrtc/attention_forward_wgmma.cuh";
  f.kernel_template = "flashrtc::attention_forward_wgmma";
  f.template_args = forward_block_template_args();
  f.tile_axes = {{128, 192}, {64, 80, 96, 112, 128, 144, 160, 176, 192}, {12, 16}, {2, 3}};
  // Two consumer warp groups of 64 query rows, K and V double buffered; block_n as large as O, S and P fit
  // in 240 registers and the tiles in 227 KiB (FlashAttention-3's tiles, narrowed to that budget).
  // bf16 on an H200, B = 4, H = 2048 / d, N = 4096, `flashrtc tune --space full` (docs/PERFORMANCE.md).
  // Every default compiles without spills for sm_90a, causal masks included.
  f.defaults = {
      {64, {{{128, 128, 12, 2}}}, "d=64: 398 TFLOP/s (causal 376); 192x112 with 16 warps ran 418 but 353 causal"},
      {96, {{{128, 128, 12, 2}}}, "d=96: the d=64 and d=128 choice; not swept"},
      {128,
       {{{128, 160, 12, 2}, 0, 2048}, {{128, 128, 12, 2}}},
       "d=128: 634 (causal 535); 128x128 626 (530), 128x176 625 (541); below 2048 keys 128x128, whose key tiles "
       "do not overhang the sequence (160-key tiles compute 25% padding at 512 keys)"},
      {160, {{{128, 112, 12, 2}}}, "d=160: the widest key tile that fits; not swept"},
      {192, {{{128, 112, 12, 2}}}, "d=192: the widest key tile that fits; not swept"},
      {224, {{{128, 80, 12, 2}}}, "d=224: 128x96 spills under a causal mask"},
      {256, {{{128, 64, 12, 2}}}, "d=256: 645 (causal 548); 128x80 ran 704 (579) but spills under a causal mask"},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_launch;
  return f;
}

}  // namespace

const KernelFamily& forward_wgmma_family() {
  static const KernelFamily family = describe();
  return family;
}

}  // namespace flashrtc::detail

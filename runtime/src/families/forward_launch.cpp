#include "families/forward_launch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "flashrtc/attention_params.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/score_mods.cuh"

namespace flashrtc::detail {

static_assert(static_cast<int>(kernel::Mask::kNone) == static_cast<int>(MaskKind::kNone));
static_assert(static_cast<int>(kernel::Mask::kCausalTopLeft) == static_cast<int>(MaskKind::kCausalTopLeft));
static_assert(static_cast<int>(kernel::Mask::kCausalBottomRight) == static_cast<int>(MaskKind::kCausalBottomRight));
static_assert(unsigned(kernel::kVariantWindow) == kVariantWindow &&
              unsigned(kernel::kVariantSoftcap) == kVariantSoftcap &&
              unsigned(kernel::kVariantAlibi) == kVariantAlibi && unsigned(kernel::kVariantSinks) == kVariantSinks);

namespace {

double softmax_scale(const ForwardParams& p) {
  return p.softmax_scale ? *p.softmax_scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
}

}  // namespace

kernel::ForwardParams forward_kernel_params(const CallPlan& plan, const ForwardParams& p) {
  const std::int64_t num_m_blocks = (p.seqlen_q + plan.spec.tile.block_m - 1) / plan.spec.tile.block_m;
  const __int128 blocks = static_cast<__int128>(num_m_blocks) * p.batch * p.heads_q;
  if (blocks > std::numeric_limits<std::int32_t>::max())
    throw Error(ErrorCode::kInvalidArgument,
                "batch * heads_q * ceil(seqlen_q / block_m) = " + std::to_string(static_cast<long double>(blocks)) +
                    " work tiles: index overflow (at most 2^31 - 1)");
  kernel::ForwardParams k{};
  k.q = p.q.data;
  k.k = p.k.data;
  k.v = p.v.data;
  k.o = const_cast<void*>(p.o.data);
  k.lse = p.lse;
  k.q_stride_batch = p.q.stride_batch, k.q_stride_seq = p.q.stride_seq, k.q_stride_head = p.q.stride_head;
  k.k_stride_batch = p.k.stride_batch, k.k_stride_seq = p.k.stride_seq, k.k_stride_head = p.k.stride_head;
  k.v_stride_batch = p.v.stride_batch, k.v_stride_seq = p.v.stride_seq, k.v_stride_head = p.v.stride_head;
  k.o_stride_batch = p.o.stride_batch, k.o_stride_seq = p.o.stride_seq, k.o_stride_head = p.o.stride_head;
  k.seqlen_q = static_cast<int>(p.seqlen_q);
  k.seqlen_kv = static_cast<int>(p.seqlen_kv);
  k.heads_q = static_cast<int>(p.heads_q);
  k.kv_group = static_cast<int>(p.heads_q / p.heads_kv);
  k.num_m_blocks = static_cast<int>(num_m_blocks);
  k.num_blocks = static_cast<int>(blocks);
  k.causal_chunk = 1;
  k.whole_tiles = k.num_blocks;
  k.split_key_tiles = k.split_run = k.split_longer_runs = 0;
  k.scale_log2 = static_cast<float>(softmax_scale(p) * 1.4426950408889634);
  return k;
}

kernel::VariantForwardParams variant_forward_kernel_params(const CallPlan& plan, const ForwardParams& p) {
  kernel::VariantForwardParams k{};
  k.dense = forward_kernel_params(plan, p);
  // Past every row and key either way (lengths are ints): the same keys as the call's wider window.
  const auto window = [](std::int64_t w) {
    return static_cast<int>(std::min<std::int64_t>(w, std::numeric_limits<int>::max()));
  };
  k.window_left = window(p.variants.window_left);
  k.window_right = window(p.variants.window_right);
  if (p.variants.softcap > 0.f) {
    const Softcap cap = softcap_factors(softmax_scale(p), p.variants.softcap);
    k.softcap_pre = cap.pre;
    k.softcap_post = cap.post;
  }
  return k;
}

void build_forward_block_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args) {
  const ForwardParams& p = *static_cast<const ForwardParams*>(op_params);
  const auto set_shape = [&](const kernel::ForwardParams& k) {
    shape.grid[0] = static_cast<unsigned>(k.num_blocks);
    shape.block[0] = static_cast<unsigned>(plan.threads);
    shape.dynamic_smem_bytes = static_cast<unsigned>(plan.smem_bytes);
  };
  if (plan.spec.variants) {
    const kernel::VariantForwardParams k = variant_forward_kernel_params(plan, p);
    set_shape(k.dense);
    args.push(k);
    return;
  }
  const kernel::ForwardParams k = forward_kernel_params(plan, p);
  set_shape(k);
  args.push(k);
}

namespace {

// A packed tensor as the dense kernels index it: one batch per sequence, each starting at row 0 (the kernel
// moves it to the sequence's first row).
TensorRef packed(const TensorRef& t) {
  TensorRef r = t;
  r.stride_batch = 0;
  return r;
}

}  // namespace

kernel::VarlenForwardParams varlen_forward_kernel_params(const CallPlan& plan, const VarlenForwardParams& p) {
  ForwardParams dense;
  dense.dtype = p.dtype;
  dense.batch = p.batch;
  dense.seqlen_q = p.max_seqlen_q;
  dense.seqlen_kv = p.max_seqlen_k;
  dense.heads_q = p.heads_q;
  dense.heads_kv = p.heads_kv;
  dense.head_dim = p.head_dim;
  dense.q = packed(p.q);
  dense.k = packed(p.k);
  dense.v = packed(p.v);
  dense.o = packed(p.o);
  dense.lse = p.lse;
  dense.softmax_scale = p.softmax_scale;
  dense.mask = p.mask;
  kernel::VarlenForwardParams k{};
  k.dense = forward_kernel_params(plan, dense);
  k.cu_seqlens_q = p.cu_seqlens_q;
  k.cu_seqlens_k = p.cu_seqlens_k;
  k.seqused_k = p.seqused_k;
  k.total_q = static_cast<int>(p.total_q);
  k.total_k = static_cast<int>(p.total_k);
  return k;
}

void build_varlen_forward_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                 KernelArgs& args) {
  const kernel::VarlenForwardParams k =
      varlen_forward_kernel_params(plan, *static_cast<const VarlenForwardParams*>(op_params));
  shape.grid[0] = static_cast<unsigned>(k.dense.num_blocks);
  shape.block[0] = static_cast<unsigned>(plan.threads);
  shape.dynamic_smem_bytes = static_cast<unsigned>(plan.smem_bytes);
  args.push(k);
}

}  // namespace flashrtc::detail

#include "families/backward_launch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "families/attention_tensor_map.hpp"
#include "flashrtc/backward_params.cuh"
#include "flashrtc/dq_accum_layout.cuh"
#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace {

// The grid of blocks_per_slice * slices blocks, checked against the 32-bit grid index.
void set_grid(LaunchShape& shape, const CallPlan& plan, std::int64_t blocks_per_slice, std::int64_t slices,
              const char* what) {
  const __int128 blocks = static_cast<__int128>(blocks_per_slice) * slices;
  if (blocks > std::numeric_limits<std::int32_t>::max())
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " = " +
                                                 std::to_string(static_cast<long double>(blocks)) +
                                                 " thread blocks: index overflow (the grid allows 2^31 - 1)");
  shape.grid[0] = static_cast<unsigned>(blocks);
  shape.block[0] = static_cast<unsigned>(plan.threads);
  shape.dynamic_smem_bytes = static_cast<unsigned>(plan.smem_bytes);
}

kernel::BackwardParams kernel_params(const BackwardLaunch& call, std::int64_t num_blocks) {
  const BackwardParams& p = *call.params;
  kernel::BackwardParams k{};
  k.q = p.q.data;
  k.k = p.k.data;
  k.v = p.v.data;
  k.o = p.o.data;
  k.d_o = p.d_o.data;
  k.lse = p.lse;
  k.d_q = const_cast<void*>(p.d_q.data);
  k.d_k = const_cast<void*>(p.d_k.data);
  k.d_v = const_cast<void*>(p.d_v.data);
  k.d_rows = call.d_rows;
  k.dq_accum = call.dq_accum;
  k.dq_tile_rows = call.dq_tile_rows;
  k.q_stride_batch = p.q.stride_batch, k.q_stride_seq = p.q.stride_seq, k.q_stride_head = p.q.stride_head;
  k.k_stride_batch = p.k.stride_batch, k.k_stride_seq = p.k.stride_seq, k.k_stride_head = p.k.stride_head;
  k.v_stride_batch = p.v.stride_batch, k.v_stride_seq = p.v.stride_seq, k.v_stride_head = p.v.stride_head;
  k.o_stride_batch = p.o.stride_batch, k.o_stride_seq = p.o.stride_seq, k.o_stride_head = p.o.stride_head;
  k.do_stride_batch = p.d_o.stride_batch, k.do_stride_seq = p.d_o.stride_seq,
  k.do_stride_head = p.d_o.stride_head;
  k.dq_stride_batch = p.d_q.stride_batch, k.dq_stride_seq = p.d_q.stride_seq,
  k.dq_stride_head = p.d_q.stride_head;
  k.dk_stride_batch = p.d_k.stride_batch, k.dk_stride_seq = p.d_k.stride_seq,
  k.dk_stride_head = p.d_k.stride_head;
  k.dv_stride_batch = p.d_v.stride_batch, k.dv_stride_seq = p.d_v.stride_seq,
  k.dv_stride_head = p.d_v.stride_head;
  k.batch = static_cast<int>(p.batch);
  k.seqlen_q = static_cast<int>(p.seqlen_q);
  k.seqlen_kv = static_cast<int>(p.seqlen_kv);
  k.heads_q = static_cast<int>(p.heads_q);
  k.heads_kv = static_cast<int>(p.heads_kv);
  k.kv_group = static_cast<int>(p.heads_q / p.heads_kv);
  k.num_blocks = static_cast<int>(num_blocks);
  const double scale = p.softmax_scale ? *p.softmax_scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  k.scale = static_cast<float>(scale);
  k.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  return k;
}

}  // namespace

void build_backward_key_blocks_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                      KernelArgs& args) {
  const BackwardLaunch& call = *static_cast<const BackwardLaunch*>(op_params);
  const BackwardParams& p = *call.params;
  const std::int64_t n_blocks = (p.seqlen_kv + plan.spec.tile.block_n - 1) / plan.spec.tile.block_n;
  set_grid(shape, plan, n_blocks, p.batch * p.heads_kv, "batch * heads_kv * ceil(seqlen_kv / block_n)");
  args.push(kernel_params(call, n_blocks));
}

void build_backward_query_blocks_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                        KernelArgs& args) {
  const BackwardLaunch& call = *static_cast<const BackwardLaunch*>(op_params);
  const BackwardParams& p = *call.params;
  const std::int64_t m_blocks = (p.seqlen_q + plan.spec.tile.block_m - 1) / plan.spec.tile.block_m;
  set_grid(shape, plan, m_blocks, p.batch * p.heads_q, "batch * heads_q * ceil(seqlen_q / block_m)");
  args.push(kernel_params(call, m_blocks));
}

namespace {

kernel::VarlenBackwardParams varlen_kernel_params(const VarlenBackwardLaunch& call, std::int64_t num_blocks) {
  const VarlenBackwardParams& p = *call.params;
  kernel::VarlenBackwardParams k{};
  k.dense = kernel_params(call.dense, num_blocks);
  k.cu_seqlens_q = p.cu_seqlens_q;
  k.cu_seqlens_k = p.cu_seqlens_k;
  k.seqused_k = p.seqused_k;
  k.total_q = static_cast<int>(p.total_q);
  k.total_k = static_cast<int>(p.total_k);
  return k;
}

}  // namespace

void build_varlen_backward_key_blocks_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                             KernelArgs& args) {
  const VarlenBackwardLaunch& call = *static_cast<const VarlenBackwardLaunch*>(op_params);
  const VarlenBackwardParams& p = *call.params;
  // One block at least per (sequence, kv head): with max_seqlen_k = 0 it writes the keys a sequence owns
  // (none where the host's bound holds) and a grid of no blocks is not a launch.
  const std::int64_t n_blocks =
      std::max<std::int64_t>((p.max_seqlen_k + plan.spec.tile.block_n - 1) / plan.spec.tile.block_n, 1);
  set_grid(shape, plan, n_blocks, p.batch * p.heads_kv, "batch * heads_kv * ceil(max_seqlen_k / block_n)");
  args.push(varlen_kernel_params(call, n_blocks));
}

void build_varlen_backward_query_blocks_launch(const CallPlan& plan, const void* op_params,
                                               LaunchShape& shape, KernelArgs& args) {
  const VarlenBackwardLaunch& call = *static_cast<const VarlenBackwardLaunch*>(op_params);
  const VarlenBackwardParams& p = *call.params;
  const std::int64_t m_blocks = (p.max_seqlen_q + plan.spec.tile.block_m - 1) / plan.spec.tile.block_m;
  set_grid(shape, plan, m_blocks, p.batch * p.heads_q, "batch * heads_q * ceil(max_seqlen_q / block_m)");
  args.push(varlen_kernel_params(call, m_blocks));
}

namespace {

// The maps of q, k, v and d_o over tensors of `batch` batches of seqlen_q and seqlen_kv rows.
void push_maps(const BackwardParams& p, std::int64_t seqlen_q, std::int64_t seqlen_kv, std::int64_t batch,
               KernelArgs& args, int panel_bytes, int q_rows, int kv_rows) {
  const int d = static_cast<int>(p.head_dim);
  args.push(attention_tensor_map(p.q, p.dtype, seqlen_q, p.heads_q, batch, d, q_rows, panel_bytes));
  args.push(attention_tensor_map(p.k, p.dtype, seqlen_kv, p.heads_kv, batch, d, kv_rows, panel_bytes));
  args.push(attention_tensor_map(p.v, p.dtype, seqlen_kv, p.heads_kv, batch, d, kv_rows, panel_bytes));
  args.push(attention_tensor_map(p.d_o, p.dtype, seqlen_q, p.heads_q, batch, d, q_rows, panel_bytes));
}

}  // namespace

void push_backward_tensor_maps(const void* op_params, KernelArgs& args, int panel_bytes, int q_rows,
                               int kv_rows) {
  const BackwardParams& p = *static_cast<const BackwardLaunch*>(op_params)->params;
  push_maps(p, p.seqlen_q, p.seqlen_kv, p.batch, args, panel_bytes, q_rows, kv_rows);
}

void push_varlen_backward_tensor_maps(const void* op_params, KernelArgs& args, int panel_bytes, int q_rows,
                                      int kv_rows) {
  const VarlenBackwardLaunch& call = *static_cast<const VarlenBackwardLaunch*>(op_params);
  // A map has no empty dimension: without keys (total_k = 0) K and V get one row, which no block reads.
  push_maps(*call.dense.params, std::max<std::int64_t>(call.params->total_q, 1),
            std::max<std::int64_t>(call.params->total_k, 1), 1, args, panel_bytes, q_rows, kv_rows);
}

void build_backward_rows_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                KernelArgs& args) {
  const BackwardLaunch& call = *static_cast<const BackwardLaunch*>(op_params);
  const BackwardParams& p = *call.params;
  const __int128 rows = static_cast<__int128>(p.batch) * p.heads_q * p.seqlen_q;
  const std::int64_t blocks =
      static_cast<std::int64_t>((rows + plan.spec.tile.block_m - 1) / plan.spec.tile.block_m);
  set_grid(shape, plan, blocks, 1, "ceil(batch * heads_q * seqlen_q / block_m)");
  args.push(kernel_params(call, blocks));
}

namespace {

void check_dq_tiles(int dq_tile_rows) {
  if (dq_tile_rows <= 0 || dq_tile_rows % kDqSliceRows != 0)
    throw Error(ErrorCode::kInternal, "dQ workspace tiles of " + std::to_string(dq_tile_rows) +
                                          " queries: the conversion reads slices of " +
                                          std::to_string(kDqSliceRows));
}

}  // namespace

void build_backward_dq_convert_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                      KernelArgs& args) {
  const BackwardLaunch& call = *static_cast<const BackwardLaunch*>(op_params);
  if (call.dq_tile_rows == 0) return build_backward_rows_launch(plan, op_params, shape, args);
  check_dq_tiles(call.dq_tile_rows);
  const BackwardParams& p = *call.params;
  const std::int64_t slices = (p.seqlen_q + kDqSliceRows - 1) / kDqSliceRows;
  set_grid(shape, plan, slices, p.batch * p.heads_q, "batch * heads_q * ceil(seqlen_q / 64)");
  args.push(kernel_params(call, slices));
}

void build_varlen_backward_dq_convert_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                             KernelArgs& args) {
  const VarlenBackwardLaunch& call = *static_cast<const VarlenBackwardLaunch*>(op_params);
  check_dq_tiles(call.dense.dq_tile_rows);
  const VarlenBackwardParams& p = *call.params;
  const std::int64_t slices = (p.max_seqlen_q + kDqSliceRows - 1) / kDqSliceRows;
  set_grid(shape, plan, slices, p.batch * p.heads_q, "batch * heads_q * ceil(max_seqlen_q / 64)");
  args.push(varlen_kernel_params(call, slices));
}

}  // namespace flashrtc::detail

#pragma once
// The launches of the backward families, which share kernel::BackwardParams (backward_params.cuh). Their
// build_launch takes a BackwardLaunch: the validated call and the workspaces attention_backward allocated.
#include "flashrtc/attention_params.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/varlen_params.hpp"

namespace flashrtc::detail {

struct BackwardLaunch {
  const BackwardParams* params = nullptr;
  float* d_rows = nullptr;    // [batch, heads_q, seqlen_q]: D = rowsum(dO * O)
  float* dq_accum = nullptr;  // fp32 dQ (dq_accum_layout.cuh), or null where a separate pass writes d_q
  int dq_tile_rows = 0;       // its layout: 0 row-major, else the fused kernel's tiles of this many queries
};

// The launches of the varlen backward's kernels (docs/varlen.md): the call, and `dense`, the dense call its
// kernels see (batch = sequences, seqlen_q and seqlen_kv = max_seqlen_q and max_seqlen_k, batch strides 0,
// d_rows [heads_q, total_q] like lse).
struct VarlenBackwardLaunch {
  const VarlenBackwardParams* params = nullptr;
  BackwardLaunch dense;
};

// KernelFamily::build_launch of the kernels with one thread block per (batch, kv head, block_n keys): the
// main kernel. Throws Error(kInvalidArgument) when the grid would exceed 2^31 - 1 blocks (as every builder
// here).
void build_backward_key_blocks_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                      KernelArgs& args);
// One thread block per (batch, query head, block_m queries): the deterministic dQ pass.
void build_backward_query_blocks_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                        KernelArgs& args);
// Their varlen variants over a VarlenBackwardLaunch: one thread block per (sequence, kv head, block_n keys of
// max_seqlen_k, at least one block), and per (sequence, query head, block_m queries of max_seqlen_q).
void build_varlen_backward_key_blocks_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                             KernelArgs& args);
void build_varlen_backward_query_blocks_launch(const CallPlan& plan, const void* op_params,
                                               LaunchShape& shape, KernelArgs& args);
// For the Hopper kernels, which take the TMA maps of q, k, v and d_o after the params
// (attention_tensor_map.hpp): pushes them, boxes of one panel_bytes swizzle panel by q_rows rows (q, d_o) or
// kv_rows rows (k, v).
void push_backward_tensor_maps(const void* op_params, KernelArgs& args, int panel_bytes, int q_rows,
                               int kv_rows);
// Their varlen variant over a VarlenBackwardLaunch: maps over the packed tensors as one batch of total rows
// (the kernels offset their coordinates by their sequence's first rows).
void push_varlen_backward_tensor_maps(const void* op_params, KernelArgs& args, int panel_bytes, int q_rows,
                                      int kv_rows);
// One thread block per block_m rows of [batch, heads_q, seqlen_q]: the row passes.
void build_backward_rows_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                KernelArgs& args);
// The dQ conversion: over a tiled workspace (the fused kernels'), one thread block per 64-query slice of each
// (batch, query head); over a row-major one, the row passes' grid.
void build_backward_dq_convert_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                      KernelArgs& args);
// Its varlen variant over a VarlenBackwardLaunch with a tiled workspace: one thread block per 64-query slice
// of max_seqlen_q of each (sequence, query head).
void build_varlen_backward_dq_convert_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                             KernelArgs& args);

}  // namespace flashrtc::detail

#pragma once
// The backward kernels' launch parameters, one struct for every kernel of the backward pass. Compiled by
// NVRTC and by the host compiler alike (the runtime includes this file), so the struct has one layout on both
// sides: fixed-width fields only.
#include "flashrtc/forward_params.cuh"

namespace flashrtc {
namespace kernel {

struct BackwardParams {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* d_o;
  const float* lse;  // the forward's [batch, heads_q, seqlen_q]
  void* d_q;
  void* d_k;
  void* d_v;
  float* d_rows;    // workspace: D = rowsum(dO * O), [batch, heads_q, seqlen_q]
  float* dq_accum;  // workspace: dQ in fp32, laid out as dq_accum_layout.cuh says; null when a separate dQ
                    // pass writes d_q (deterministic mode)
  // Element strides of [batch, seq, head]; the head dim is contiguous (checked by the runtime).
  long long q_stride_batch, q_stride_seq, q_stride_head;
  long long k_stride_batch, k_stride_seq, k_stride_head;
  long long v_stride_batch, v_stride_seq, v_stride_head;
  long long o_stride_batch, o_stride_seq, o_stride_head;
  long long do_stride_batch, do_stride_seq, do_stride_head;
  long long dq_stride_batch, dq_stride_seq, dq_stride_head;
  long long dk_stride_batch, dk_stride_seq, dk_stride_head;
  long long dv_stride_batch, dv_stride_seq, dv_stride_head;
  int batch;
  int seqlen_q, seqlen_kv;
  int heads_q, heads_kv;
  int kv_group;      // heads_q / heads_kv
  int num_blocks;    // blocks along the kernel's own axis: key blocks, query blocks or row blocks
  int dq_tile_rows;  // dq_accum's layout: 0 row-major, else tiles of this many queries (dq_accum_layout.cuh)
  float scale;       // softmax scale (dS to dQ and dK)
  float scale_log2;  // softmax scale * log2(e): scores go straight into exp2
};

// The variable-length backward's parameters (docs/varlen.md), as VarlenForwardParams extends the forward's:
// the dense ones over the packed tensors, one "batch" per sequence (batch strides 0), seqlen_q and seqlen_kv
// the host's max_seqlen_q and max_seqlen_k; lse and d_rows are [heads_q, total_q].
struct VarlenBackwardParams {
  BackwardParams dense;
  const int* cu_seqlens_q;  // [sequences + 1]
  const int* cu_seqlens_k;  // [sequences + 1]
  const int* seqused_k;     // [sequences] or null
  int total_q, total_k;     // rows of q, o, d_o, d_q and of k, v, d_k, d_v; total_q also lse's head stride
};

}  // namespace kernel
}  // namespace flashrtc

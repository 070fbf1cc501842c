#pragma once
// The backward's passes over query rows, one warp per row of (batch, query head, query), for every element
// type:
//   attention_backward_prep:       D = rowsum(dO * O) in fp32 (FlashAttention-2's pre-pass), and that row of
//                                  the fp32 dQ workspace zeroed for the main kernel's adds;
//   attention_backward_dq_convert: dQ from that workspace into d_q's element type and strides.
// Rows are linear in [batch, heads_q, seqlen_q], the layout of lse and D; the workspace's is
// dq_accum_layout.cuh's. A row's elements are visited lane, lane + 32, ...: each warp access of d_o, o and
// d_q is one contiguous run of the row, and of the workspace whole 32-byte sectors.
#include "flashrtc/backward_params.cuh"
#include "flashrtc/dq_accum_layout.cuh"
#include "flashrtc/element_convert.cuh"
#include "flashrtc/rows_shape.cuh"

namespace flashrtc {

// The (batch, head, query) of linear row `row`.
struct QueryRow {
  long long batch, head, query;
  __device__ __forceinline__ QueryRow(long long row, const kernel::BackwardParams& p)
      : batch(row / p.seqlen_q / p.heads_q), head(row / p.seqlen_q % p.heads_q), query(row % p.seqlen_q) {}
};

template <typename T, int kHeadDim, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) attention_backward_prep(const kernel::BackwardParams p) {
  static_assert(RowsShape{kHeadDim, kBlockM, 1, kWarps, 1}.invalid_reason() == nullptr,
                "invalid row-pass tile");
  const int lane = threadIdx.x % 32;
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  for (int i = threadIdx.x / 32; i < kBlockM; i += kWarps) {
    const long long row = static_cast<long long>(blockIdx.x) * kBlockM + i;
    if (row >= rows) return;
    const QueryRow r(row, p);
    const T* o = static_cast<const T*>(p.o) + r.batch * p.o_stride_batch + r.query * p.o_stride_seq +
                 r.head * p.o_stride_head;
    const T* d_o = static_cast<const T*>(p.d_o) + r.batch * p.do_stride_batch + r.query * p.do_stride_seq +
                   r.head * p.do_stride_head;
    float sum = 0.f;
#pragma unroll
    for (int c = lane; c < kHeadDim; c += 32) sum += to_float(d_o[c]) * to_float(o[c]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) p.d_rows[row] = sum;
    if (p.dq_accum) {
#pragma unroll
      for (int c = lane; c < kHeadDim; c += 32)
        p.dq_accum[dq_accum_offset(row / p.seqlen_q, r.query, c, p.seqlen_q, kHeadDim, p.dq_tile_rows)] = 0.f;
    }
  }
}

template <typename T, int kHeadDim, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) attention_backward_dq_convert(const kernel::BackwardParams p) {
  static_assert(RowsShape{kHeadDim, kBlockM, 1, kWarps, 1}.invalid_reason() == nullptr,
                "invalid row-pass tile");
  const int lane = threadIdx.x % 32;
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  for (int i = threadIdx.x / 32; i < kBlockM; i += kWarps) {
    const long long row = static_cast<long long>(blockIdx.x) * kBlockM + i;
    if (row >= rows) return;
    const QueryRow r(row, p);
    T* d_q = static_cast<T*>(p.d_q) + r.batch * p.dq_stride_batch + r.query * p.dq_stride_seq +
             r.head * p.dq_stride_head;
#pragma unroll
    for (int c = lane; c < kHeadDim; c += 32)
      d_q[c] = from_float<T>(
          p.dq_accum[dq_accum_offset(row / p.seqlen_q, r.query, c, p.seqlen_q, kHeadDim, p.dq_tile_rows)]);
  }
}

}  // namespace flashrtc

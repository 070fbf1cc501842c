#pragma once
// The backward's passes over query rows, for every element type:
//   attention_backward_prep:       D = rowsum(dO * O) in fp32 (FlashAttention-2's pre-pass), one warp per row
//                                  of (batch, query head, query);
//   attention_backward_dq_convert: dQ from the fp32 workspace (zeroed on the stream before the main kernel,
//                                  which adds into it) into d_q's element type and strides; kVarlen: a packed
//                                  call's (docs/varlen.md), from each sequence's tiles (dq_accum_layout.cuh).
// Rows are linear in [batch, heads_q, seqlen_q], the layout of lse and D; the workspace's is
// dq_accum_layout.cuh's. The prep's row elements are visited lane, lane + 32, ...: each warp access of d_o and
// o is one contiguous run of the row.
#include "flashrtc/backward_params.cuh"
#include "flashrtc/dq_accum_layout.cuh"
#include "flashrtc/element_convert.cuh"
#include "flashrtc/rows_shape.cuh"
#include "flashrtc/varlen_sequence.cuh"

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
  }
}

// Four elements of a row into d_q: 8 bytes for 16-bit types, 16 for fp32 (rows are 16-byte aligned, col % 4 == 0).
template <typename T>
__device__ __forceinline__ void store_four(T* dst, float4 v) {
  struct alignas(4 * sizeof(T)) Four {
    T x[4];
  };
  *reinterpret_cast<Four*>(dst) = Four{{from_float<T>(v.x), from_float<T>(v.y), from_float<T>(v.z), from_float<T>(v.w)}};
}

// One 64-query slice of the tiled workspace (src, one contiguous run) into the rows of d_q from q0 (d_q: the
// head's row 0), those before seqlen_q: read in order by 16-byte vectors, each four adjacent columns of one
// query (dq_slice_position), four loads in flight per thread before their stores (which the compiler cannot
// move them past).
template <typename T, int kHeadDim, int kWarps>
__device__ __forceinline__ void convert_dq_slice(const float4* src, T* d_q, long long stride_seq, int q0,
                                                 int seqlen_q) {
  constexpr int kThreads = kWarps * 32, kVectors = kDqSliceRows * kHeadDim / 4, kBatch = 4;
  for (int base = threadIdx.x; base < kVectors; base += kBatch * kThreads) {
    float4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (base + j * kThreads < kVectors) v[j] = src[base + j * kThreads];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      const DqSlicePosition at = dq_slice_position(2 * i);
      const long long query = q0 + at.query;
      if (i < kVectors && query < seqlen_q) store_four(d_q + query * stride_seq + at.column, v[j]);
    }
  }
}

// With p.dq_tile_rows > 0 (the fused kernels' layout), one block per 64-query slice of one (batch, query head),
// blockIdx.x = (batch * heads_q + head) * ceil(seqlen_q / 64) + slice. With 0 (row-major), one warp per row as
// the prep. kVarlen (tiled only): batch is a sequence, seqlen_q max_seqlen_q; slices past the sequence's
// queries have nothing to do, rows outside every sequence are never written.
// At least 8 blocks per SM is all a streaming pass needs: without that bound ptxas for sm_100 held the kernel to
// 32 registers (full occupancy) and spilled the batch of loads.
template <typename T, int kHeadDim, int kBlockM, int kWarps, bool kVarlen = false>
__global__ void __launch_bounds__(kWarps * 32, 8)
    attention_backward_dq_convert(const typename kernel::BackwardParamsOf<kVarlen>::type args) {
  static_assert(RowsShape{kHeadDim, kBlockM, 1, kWarps, 1}.invalid_reason() == nullptr,
                "invalid row-pass tile");
  const kernel::BackwardParams& p = kernel::dense_params(args);
  if constexpr (kVarlen) {
    const long long slices = (p.seqlen_q + kDqSliceRows - 1) / kDqSliceRows;
    const long long sequence_head = blockIdx.x / slices;  // sequence * heads_q + head
    const int sequence = static_cast<int>(sequence_head / p.heads_q);
    const long long head = sequence_head % p.heads_q;
    const int q0 = static_cast<int>(blockIdx.x % slices) * kDqSliceRows;
    const VarlenSequence seq = varlen_sequence(args, sequence);
    if (q0 >= seq.seqlen_q) return;
    const long long tile = head * varlen_dq_tiles_per_head(args.total_q, p.batch, p.dq_tile_rows) +
                           varlen_dq_first_tile(seq.first_q, sequence, p.dq_tile_rows);
    const float4* src = reinterpret_cast<const float4*>(p.dq_accum + (tile * p.dq_tile_rows + q0) * kHeadDim);
    T* d_q = static_cast<T*>(p.d_q) + seq.first_q * p.dq_stride_seq + head * p.dq_stride_head;
    convert_dq_slice<T, kHeadDim, kWarps>(src, d_q, p.dq_stride_seq, q0, seq.seqlen_q);
    return;
  } else if (p.dq_tile_rows > 0) {
    const long long slices = (p.seqlen_q + kDqSliceRows - 1) / kDqSliceRows;
    const long long head = blockIdx.x / slices;  // batch * heads_q + head
    const int q0 = static_cast<int>(blockIdx.x % slices) * kDqSliceRows;
    const long long tiles = (p.seqlen_q + p.dq_tile_rows - 1) / p.dq_tile_rows;
    // Slice s of a head starts s * 64 rows into the head's run of tiles.
    const float4* src =
        reinterpret_cast<const float4*>(p.dq_accum + (head * tiles * p.dq_tile_rows + q0) * kHeadDim);
    T* d_q = static_cast<T*>(p.d_q) + head / p.heads_q * p.dq_stride_batch + head % p.heads_q * p.dq_stride_head;
    convert_dq_slice<T, kHeadDim, kWarps>(src, d_q, p.dq_stride_seq, q0, p.seqlen_q);
    return;
  }
  const int lane = threadIdx.x % 32;
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  for (int i = threadIdx.x / 32; i < kBlockM; i += kWarps) {
    const long long row = static_cast<long long>(blockIdx.x) * kBlockM + i;
    if (row >= rows) return;
    const QueryRow r(row, p);
    T* d_q = static_cast<T*>(p.d_q) + r.batch * p.dq_stride_batch + r.query * p.dq_stride_seq +
             r.head * p.dq_stride_head;
    const float* src = p.dq_accum + row * kHeadDim;
#pragma unroll
    for (int c = lane; c < kHeadDim; c += 32) d_q[c] = from_float<T>(src[c]);
  }
}

}  // namespace flashrtc

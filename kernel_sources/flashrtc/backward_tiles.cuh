#pragma once
// Shared-memory staging of the tensor-core backward kernels: [rows, head_dim] 16-bit tiles in MmaTileRows'
// layout, and the per-row softmax statistics (lse in the log2 domain, D) of a block of query rows.
#include "flashrtc/cp_async.cuh"
#include "flashrtc/mma_backward_shape.cuh"
#include "flashrtc/online_softmax.cuh"

namespace flashrtc {

// Copies rows [row0, row0 + kRows) of a [seq, head_dim] matrix (rows stride_seq elements apart) into the tile
// at shared address dst; rows at or past rows_end and columns past head_dim read as zeros.
template <typename T, int kHeadDim, int kRows, int kThreads>
__device__ __forceinline__ void load_rows_async(unsigned dst, const T* src, long long stride_seq,
                                                long long row0, long long rows_end) {
  constexpr MmaTileRows kLayout{kHeadDim};
  constexpr int kChunks = kLayout.chunks();
  const long long left = rows_end - row0;
  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks;
    const int chunk = c % kChunks;
    const bool valid = r < left && chunk * 8 < kHeadDim;
    cp_async_16(dst + unsigned(r * kLayout.pitch_chunks() + chunk) * 16u,
                valid ? src + (row0 + r) * stride_seq + chunk * 8 : src, valid);
  }
}

// lse * log2(e) and D of query `row` (x: lse_log2, y: D). Rows past seqlen_q, and rows that saw no key in the
// forward (lse = -inf), get lse_log2 = +inf: their P = exp2(s - lse_log2) is 0.
__device__ __forceinline__ float2 row_stats(const float* lse_row, const float* d_row, long long row,
                                            int seqlen_q) {
  constexpr float kLog2e = 1.4426950408889634f;
  float2 stats{-negative_infinity(), 0.f};
  if (row < seqlen_q) {
    const float x = lse_row[row];
    if (x != negative_infinity()) stats.x = x * kLog2e;
    stats.y = d_row[row];
  }
  return stats;
}

// row_stats of query rows [row0, row0 + kRows) into lse_log2[] and d[], by the block's kThreads threads.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_row_stats(float* lse_log2, float* d, const float* lse_row,
                                               const float* d_row, long long row0, int seqlen_q) {
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    const float2 stats = row_stats(lse_row, d_row, row0 + r, seqlen_q);
    lse_log2[r] = stats.x;
    d[r] = stats.y;
  }
}

}  // namespace flashrtc

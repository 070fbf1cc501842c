#pragma once
// The combine of a decode call's key splits: each split left its normalized fp32 output and natural-log lse
// (attention_decode_mma.cuh); the result over all keys weighs split s by exp(lse_s - lse), lse =
// log(sum_s exp(lse_s)). block_m rows per block in turn, every warp on each row (combine_shape.cuh).
#include "flashrtc/combine_shape.cuh"
#include "flashrtc/decode_params.cuh"
#include "flashrtc/element_convert.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/online_softmax.cuh"

namespace flashrtc {

template <typename T, int kHeadDim, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) decode_combine(const kernel::DecodeCombineParams p) {
  constexpr CombineShape kShape{kHeadDim, kBlockM, 1, kWarps, 1};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the decode combine");
  constexpr int kCols = kShape.head_dim_padded();
  extern __shared__ __align__(16) float sums[];  // [kWarps][kCols]
  __shared__ float weights[kernel::kMaxDecodeSplits];
#if __CUDA_ARCH__ >= 900
  // Launched to overlap the decode kernel (programmatic dependent launch): its partials are complete and
  // visible past this point.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int first = blockIdx.x * kBlockM;
  const int end = first + kBlockM < p.num_rows ? first + kBlockM : p.num_rows;
  for (int r = first; r < end; ++r) {
    // Every warp finds the row's max and sum (a few loads per lane); warp 0 keeps the weights.
    float m = negative_infinity();
    for (int s = lane; s < p.num_splits; s += 32) m = fmaxf(m, p.lse_partial[static_cast<long long>(s) * p.num_rows + r]);
    m = row_lanes_max<32>(m);
    // Every split empty: weights 0, o = 0, lse = -inf.
    const float m_use = m == negative_infinity() ? 0.f : m;
    float sum = 0.f;
    for (int s = lane; s < p.num_splits; s += 32) {
      const float w = expf(p.lse_partial[static_cast<long long>(s) * p.num_rows + r] - m_use);
      if (warp == 0) weights[s] = w;
      sum += w;
    }
    sum = row_lanes_sum<32>(sum);
    __syncthreads();  // the weights are in
    // Warp w adds splits w, w + kWarps, ...: their loads are independent, unrolled to be in flight together.
#pragma unroll
    for (int c0 = 0; c0 < kCols; c0 += 128) {
      const int col = c0 + lane * 4;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      if (col < kHeadDim) {
#pragma unroll 4
        for (int s = warp; s < p.num_splits; s += kWarps) {
          const float w = weights[s];
          if (w == 0.f) continue;  // an empty split's output is never read
          const float4 part = *reinterpret_cast<const float4*>(
              p.o_partial + (static_cast<long long>(s) * p.num_rows + r) * kHeadDim + col);
          acc.x += w * part.x, acc.y += w * part.y, acc.z += w * part.z, acc.w += w * part.w;
        }
      }
      *reinterpret_cast<float4*>(sums + warp * kCols + col) = acc;
    }
    __syncthreads();  // every warp's sums are in
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int token = r % p.seqlen_q;
    const int head = (r / p.seqlen_q) % p.heads_q;
    const int batch = r / (p.seqlen_q * p.heads_q);
    T* out = static_cast<T*>(p.o) + batch * p.o_stride_batch + token * p.o_stride_seq + head * p.o_stride_head;
    for (int col = threadIdx.x; col < kHeadDim; col += kWarps * 32) {
      float total = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) total += sums[w * kCols + col];
      out[col] = from_float<T>(total * inv);
    }
    if (threadIdx.x == 0 && p.lse != nullptr) p.lse[r] = sum > 0.f ? m_use + logf(sum) : negative_infinity();
    __syncthreads();  // the next row reuses the weights and sums
  }
}

}  // namespace flashrtc

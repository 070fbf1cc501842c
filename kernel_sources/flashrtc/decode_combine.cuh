#pragma once
// The combine of a decode call's key splits: each split left its normalized fp32 output and natural-log lse
// (attention_decode_mma.cuh); the result over all keys weighs split s by exp(lse_s - lse), lse =
// log(sum_s exp(lse_s)). One warp per output row, block_m rows per block (rows_shape.cuh).
#include "flashrtc/decode_params.cuh"
#include "flashrtc/element_convert.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/rows_shape.cuh"

namespace flashrtc {

template <typename T, int kHeadDim, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) decode_combine(const kernel::DecodeCombineParams p) {
  constexpr RowsShape kShape{kHeadDim, kBlockM, 1, kWarps, 1};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the decode combine");
  __shared__ float weights[kWarps][kernel::kMaxDecodeSplits];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int first = blockIdx.x * kBlockM;
  const int end = first + kBlockM < p.num_rows ? first + kBlockM : p.num_rows;
  for (int r = first + warp; r < end; r += kWarps) {
    float m = negative_infinity();
    for (int s = lane; s < p.num_splits; s += 32) m = fmaxf(m, p.lse_partial[static_cast<long long>(s) * p.num_rows + r]);
    m = row_lanes_max<32>(m);
    // Every split empty: weights 0, o = 0, lse = -inf.
    const float m_use = m == negative_infinity() ? 0.f : m;
    float sum = 0.f;
    for (int s = lane; s < p.num_splits; s += 32) {
      const float w = expf(p.lse_partial[static_cast<long long>(s) * p.num_rows + r] - m_use);
      weights[warp][s] = w;
      sum += w;
    }
    sum = row_lanes_sum<32>(sum);
    __syncwarp();
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int token = r % p.seqlen_q;
    const int head = (r / p.seqlen_q) % p.heads_q;
    const int batch = r / (p.seqlen_q * p.heads_q);
    T* out = static_cast<T*>(p.o) + batch * p.o_stride_batch + token * p.o_stride_seq + head * p.o_stride_head;
    for (int col = lane * 4; col < kHeadDim; col += 128) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      // Unrolled so that several splits' loads are in flight at once rather than one round trip per split.
#pragma unroll 8
      for (int s = 0; s < p.num_splits; ++s) {
        const float w = weights[warp][s];
        if (w == 0.f) continue;  // an empty split's output is never read
        const float4 part = *reinterpret_cast<const float4*>(
            p.o_partial + (static_cast<long long>(s) * p.num_rows + r) * kHeadDim + col);
        acc.x += w * part.x, acc.y += w * part.y, acc.z += w * part.z, acc.w += w * part.w;
      }
      out[col] = from_float<T>(acc.x * inv);
      out[col + 1] = from_float<T>(acc.y * inv);
      out[col + 2] = from_float<T>(acc.z * inv);
      out[col + 3] = from_float<T>(acc.w * inv);
    }
    if (lane == 0 && p.lse != nullptr) p.lse[r] = sum > 0.f ? m_use + logf(sum) : negative_infinity();
    __syncwarp();  // the weights are reused by the warp's next row
  }
}

}  // namespace flashrtc

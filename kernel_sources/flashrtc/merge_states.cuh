#pragma once
// merge_states: two attention results over disjoint key sets of the same queries into the result over their
// union, in fp32: lse = log(exp(lse_a) + exp(lse_b)), o = (exp(lse_a - lse) o_a + exp(lse_b - lse) o_b).
// A side whose lse is -inf (no key) weighs 0 and its o is never read into the sum. One warp per row
// (rows_shape.cuh); each element is read before it is written by the same thread, so o may be o_a or o_b.
#include "flashrtc/decode_params.cuh"
#include "flashrtc/element_convert.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/rows_shape.cuh"

namespace flashrtc {

template <typename T, int kHeadDim, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) merge_states(const kernel::MergeStatesParams p) {
  constexpr RowsShape kShape{kHeadDim, kBlockM, 1, kWarps, 1};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for merge_states");
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int first = blockIdx.x * kBlockM;
  const int end = first + kBlockM < p.num_rows ? first + kBlockM : p.num_rows;
  for (int r = first + warp; r < end; r += kWarps) {
    const float lse_a = p.lse_a[r];
    const float lse_b = p.lse_b[r];
    const float m = fmaxf(lse_a, lse_b);
    const float m_use = m == negative_infinity() ? 0.f : m;
    const float wa = expf(lse_a - m_use);
    const float wb = expf(lse_b - m_use);
    const float sum = wa + wb;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int token = r % p.seqlen;
    const int head = (r / p.seqlen) % p.heads;
    const int batch = r / (p.seqlen * p.heads);
    const T* a = static_cast<const T*>(p.o_a) + batch * p.a_stride_batch + token * p.a_stride_seq + head * p.a_stride_head;
    const T* b = static_cast<const T*>(p.o_b) + batch * p.b_stride_batch + token * p.b_stride_seq + head * p.b_stride_head;
    T* o = static_cast<T*>(p.o) + batch * p.o_stride_batch + token * p.o_stride_seq + head * p.o_stride_head;
    for (int col = lane; col < kHeadDim; col += 32) {
      float acc = 0.f;
      if (wa > 0.f) acc += wa * to_float(a[col]);
      if (wb > 0.f) acc += wb * to_float(b[col]);
      o[col] = from_float<T>(acc * inv);
    }
    __syncwarp();  // every lane has read its row of a and b before lane 0 may overwrite an aliased lse
    if (lane == 0 && p.lse != nullptr) p.lse[r] = sum > 0.f ? m_use + logf(sum) : negative_infinity();
  }
}

}  // namespace flashrtc

#pragma once
// A toy kernel family for tests/cpu/test_family_table.cpp: o = v row by row (queries and keys paired one to
// one), enough to show that a family added through the table alone is compiled, cached, listed and tuned.
#include "flashrtc/forward_params.cuh"

namespace flashrtc_test {

template <typename T, int kHeadDim, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) copy_v(const flashrtc::kernel::ForwardParams p) {
  static_assert(kBlockM % kWarps == 0, "rows split evenly over the warps");
  const int m_blocks = p.num_m_blocks;
  const int bh = blockIdx.x / m_blocks;
  const int head = bh % p.heads_q;
  const int batch = bh / p.heads_q;
  const long long row0 = static_cast<long long>(blockIdx.x % m_blocks) * kBlockM;
  const T* v = static_cast<const T*>(p.v) + batch * p.v_stride_batch + (head / p.kv_group) * p.v_stride_head;
  T* o = static_cast<T*>(p.o) + batch * p.o_stride_batch + head * p.o_stride_head;
  for (int i = threadIdx.x; i < kBlockM * kHeadDim; i += kWarps * 32) {
    const long long row = row0 + i / kHeadDim;
    if (row < p.seqlen_q && row < p.seqlen_kv) o[row * p.o_stride_seq + i % kHeadDim] = v[row * p.v_stride_seq + i % kHeadDim];
  }
}

}  // namespace flashrtc_test

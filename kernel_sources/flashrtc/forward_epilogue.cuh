#pragma once
// What every forward family writes once the keys are done: O = acc / l and lse per row, and the block whose
// rows see no key at all. A row without keys gets o = 0 and lse = -inf (the softmax of an empty set taken as
// zero weights), whether its block skips the key loop or it sits in a block with other rows.
#include "flashrtc/forward_block.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/online_softmax.cuh"

namespace flashrtc {

// 1 / l for the row's full sum l; 0 for a row that saw no key (its accumulators are 0, and 0 * inf is NaN).
__device__ __forceinline__ float inverse_row_sum(float l) {
  return l > 0.f ? 1.f / l : 0.f;
}

// Natural-log logsumexp of the row's scaled scores from its final max m and full sum l (log2 domain); -inf
// for a row that saw no key. log2f, not the approximate __log2f: once per row, and lg2.approx is off by
// ~2^-22 even at l = 1.
__device__ __forceinline__ float row_lse(float m, float l) {
  constexpr float kLn2 = 0.6931471805599453f;
  return l > 0.f ? (m + log2f(l)) * kLn2 : negative_infinity();
}

// kBytes zero bytes (4, 8 or 16, naturally aligned) as one store.
template <int kBytes>
__device__ __forceinline__ void store_zeros(void* ptr) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "vector width");
  if constexpr (kBytes == 16)
    *static_cast<uint4*>(ptr) = make_uint4(0u, 0u, 0u, 0u);
  else if constexpr (kBytes == 8)
    *static_cast<uint2*>(ptr) = make_uint2(0u, 0u);
  else
    *static_cast<unsigned*>(ptr) = 0u;
}

// store_rows_without_keys: a block none of whose rows sees a key (ForwardBlock::num_n_blocks == 0) writes
// o = 0 and lse = -inf, in one of two thread layouts. The kernels sit at the register limit and ptxas
// allocates a kernel as a whole, so each family keeps the layout it was tuned with: measured, the other one
// spills the tensor-core kernel (d = 128, 128x64) and costs the SIMT kernel 4 registers (sm_80, d = 96).

// The block's rows x 16-byte chunks dealt to the kThreads threads in turn, and its lse entries likewise
// (layout-free; the tensor-core kernel's).
template <int kThreads>
struct ChunksRoundRobin {};

template <int kHeadDim, typename T, int kBlockM, int kBlockN, kernel::Mask kMask, int kThreads>
__device__ __forceinline__ void store_rows_without_keys(const ForwardBlock<T, kBlockM, kBlockN, kMask>& block,
                                                        const kernel::ForwardParams& p,
                                                        ChunksRoundRobin<kThreads>) {
  static_assert(kHeadDim * sizeof(T) % 16 == 0, "rows of whole 16-byte chunks");
  constexpr int kChunks = kHeadDim * int(sizeof(T)) / 16;
  for (int c = threadIdx.x; c < kBlockM * kChunks; c += kThreads) {
    const long long row = block.m0 + c / kChunks;
    if (row < p.seqlen_q)
      store_zeros<16>(block.o + row * p.o_stride_seq + (c % kChunks) * (16 / int(sizeof(T))));
  }
  if (block.lse)
    for (int r = threadIdx.x; r < kBlockM; r += kThreads)
      if (block.m0 + r < p.seqlen_q) block.lse[block.m0 + r] = negative_infinity();
}

// Rows first_row + i (i < kRows) of the block, and in each the kVec-element vectors lane + u * kLanes
// (u < kVecs); lane 0 writes the row's lse (the SIMT kernel's register tile).
template <int kRows, int kLanes, int kVecs, int kVec>
struct RowTile {
  int first_row;
  int lane;
};

template <int kHeadDim, typename T, int kBlockM, int kBlockN, kernel::Mask kMask, int kRows, int kLanes,
          int kVecs, int kVec>
__device__ __forceinline__ void store_rows_without_keys(const ForwardBlock<T, kBlockM, kBlockN, kMask>& block,
                                                        const kernel::ForwardParams& p,
                                                        RowTile<kRows, kLanes, kVecs, kVec> tile) {
  static_assert(kLanes * kVecs * kVec == kHeadDim, "the lanes of a row cover it");
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const long long row = block.m0 + tile.first_row + i;
    if (row >= p.seqlen_q) continue;
#pragma unroll
    for (int u = 0; u < kVecs; ++u)
      store_zeros<int(sizeof(T)) * kVec>(block.o + row * p.o_stride_seq + kVec * (tile.lane + u * kLanes));
    if (block.lse && tile.lane == 0) block.lse[row] = negative_infinity();
  }
}

}  // namespace flashrtc

#pragma once
// Which keys a query row sees, for every forward family: key `col` is visible to query `row` iff
// col < seqlen_kv and, under a causal mask, col <= row + diag (ForwardBlock::diag: 0 top-left,
// seqlen_kv - seqlen_q bottom-right).
#include "flashrtc/forward_params.cuh"

namespace flashrtc {

template <kernel::Mask kMask>
struct KeyMask {
  static constexpr bool kCausal = kMask != kernel::Mask::kNone;
  int seqlen_kv;
  long long diag;

  // Whether key col is hidden from query row.
  __device__ __forceinline__ bool hides(long long row, long long col) const {
    return col >= seqlen_kv || (kCausal && col > row + diag);
  }
  // The last key query `row` sees; below 0 when it sees none. hides(row, col) == (col > last_visible(row)).
  __device__ __forceinline__ long long last_visible(long long row) const {
    const long long last_key = static_cast<long long>(seqlen_kv) - 1;
    return kCausal ? min(last_key, row + diag) : last_key;
  }
  // Whether the key tile [n0, n0 + block_n) hides any key from any query row at or after m0 (row m0 sees the
  // fewest keys): only such tiles pay for the mask.
  __device__ __forceinline__ bool tile_needs_mask(long long m0, long long n0, int block_n) const {
    return n0 + block_n > seqlen_kv || (kCausal && n0 + block_n - 1 > m0 + diag);
  }

  // hides() for the tile of queries from m0 and keys from n0, in tile-local 32-bit coordinates (row - m0,
  // col - n0, both in [0, 256)): two registers and 32-bit compares in the inner loop (the backward kernels).
  struct Local {
    int cols_left;    // keys of the tile before seqlen_kv
    int diag_offset;  // col_local > row_local + diag_offset is hidden (causal)
    __device__ __forceinline__ bool hides(int row_local, int col_local) const {
      return col_local >= cols_left || (kCausal && col_local > row_local + diag_offset);
    }
  };
  __device__ __forceinline__ Local local(long long m0, long long n0) const {
    constexpr long long kBound = 1 << 20;  // beyond the tile's extent either way: same answers, fits an int
    const long long left = seqlen_kv - n0;
    const long long offset = m0 + diag - n0;
    return {static_cast<int>(left < kBound ? left : kBound), static_cast<int>(offset < -kBound  ? -kBound
                                                                              : offset > kBound ? kBound
                                                                                                : offset)};
  }
};

}  // namespace flashrtc

#pragma once
// Which blocks a mask leaves a kernel to visit. Query row i sees key j iff j < seqlen_kv and, under a causal
// mask, j <= i + diag: diag = 0 top-left, seqlen_kv - seqlen_q bottom-right (KeyMask in mask.cuh;
// flashrtc::mask_allows on the host). A later row sees every key an earlier one sees, so both ranges are
// contiguous:
//   a block of keys from n0 is seen by the query blocks from the one that holds the first row seeing key n0
//   (the block's first key, which the most rows see) to the last: the backward's key-block kernels (dK, dV)
//   visit those;
//   a block of query rows sees the key blocks from the first to the one that holds the last key its last row
//   sees: the forward kernels and the backward's dQ kernels visit those.
// A block outside them would compute masked scores only (P = 0). Plain constexpr integer arithmetic, compiled
// by NVRTC and by the host compiler (tests/cpu/test_block_ranges.cpp checks it against mask_allows).
#include "flashrtc/forward_params.cuh"

namespace flashrtc {

// KeyMask::diag for these lengths: key j is visible to query i iff j <= i + diag (causal masks only).
template <kernel::Mask kMask>
constexpr long long mask_diag(int seqlen_q, int seqlen_kv) {
  return kMask == kernel::Mask::kCausalBottomRight ? static_cast<long long>(seqlen_kv) - seqlen_q : 0;
}

// Blocks [begin, end).
struct BlockRange {
  int begin, end;
};

// The query blocks of kBlockM rows that see any key of the block from key n0 (n0 < seqlen_kv). end is the
// number of query blocks; begin = end when none does. n0 comes in the caller's integer type (int or long
// long) and widens in n0 - diag, after the block count: widened at the call, the Hopper kernel's machine code
// comes out in another order.
template <int kBlockM, kernel::Mask kMask, typename Index>
constexpr BlockRange query_blocks_seeing(Index n0, long long diag, int seqlen_q) {
  const int num_m_blocks = (seqlen_q + kBlockM - 1) / kBlockM;
  // Blocks whose rows all precede the first row that sees key n0 (i >= n0 - diag) are skipped.
  long long first_row = kMask != kernel::Mask::kNone ? n0 - diag : 0;
  if (first_row < 0) first_row = 0;
  return {first_row >= seqlen_q ? num_m_blocks : static_cast<int>(first_row / kBlockM), num_m_blocks};
}

// The number of key blocks of kBlockN keys, from the first, that the query rows before row_end see. A block
// of rows from m0 passes m0 + block_m even where that is past seqlen_q: the kernels compute the whole tile
// (rows past the end read zeros and get P = 0).
template <int kBlockN, kernel::Mask kMask>
constexpr int key_blocks_seen(long long row_end, long long diag, int seqlen_kv) {
  long long n_end = seqlen_kv;
  if (kMask != kernel::Mask::kNone && row_end + diag < n_end) n_end = row_end + diag;
  return n_end > 0 ? static_cast<int>((n_end + kBlockN - 1) / kBlockN) : 0;
}

}  // namespace flashrtc

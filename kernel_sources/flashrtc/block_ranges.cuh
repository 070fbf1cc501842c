#pragma once
// Which blocks a mask leaves a kernel to visit. Query row i sees key j iff j < seqlen_kv and, under a causal
// mask, j <= i + diag, and under a sliding window i + diag - window_left <= j <= i + diag + window_right
// (KeyMask in mask.cuh; flashrtc::mask_allows on the host). A row's visible keys are one run whose ends only
// grow with the row, so both ranges are contiguous:
//   a block of keys from n0 is seen by the query blocks from the one that holds the first row whose run
//   reaches n0 to the one that holds the last row whose run starts at or before the block's last key (without
//   a window: the last query block): the backward's key-block kernels (dK, dV) visit those;
//   a block of query rows sees the key blocks from the one holding its first row's first key to the one
//   holding its last row's last key: the forward kernels and the backward's dQ kernels visit those.
// A block outside them would compute masked scores only (P = 0); a window's kernels skip those on both sides.
// Plain constexpr integer arithmetic, compiled by NVRTC and by the host compiler
// (tests/cpu/test_block_ranges.cpp checks it against mask_allows).
#include "flashrtc/forward_params.cuh"
#include "flashrtc/mask.cuh"

namespace flashrtc {

// KeyMask::diag for these lengths: query i's diagonal key, the causal mask's last and a window's centre. 0
// top-left, seqlen_kv - seqlen_q otherwise (bottom-right, and FlashAttention's alignment of a window without
// a causal mask: the last query's diagonal is the last key).
template <kernel::Mask kMask>
constexpr long long mask_diag(int seqlen_q, int seqlen_kv) {
  return kMask == kernel::Mask::kCausalTopLeft ? 0 : static_cast<long long>(seqlen_kv) - seqlen_q;
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

// Under a sliding window (KeyMask<kMask, true>), the ranges above bounded on both sides; begin = end when
// empty, and the kernels visit blocks begin..end - 1 only.
// The query blocks of kBlockM rows that see any key of the block of kBlockN keys from n0 (n0 < seqlen_kv), of
// the rows before seqlen_q: row i sees one iff its run reaches n0 (i >= n0 - diag - right) and starts at or
// before the block's last key (i <= last_key - diag + left). n0 in the caller's integer type, as above.
template <int kBlockM, int kBlockN, kernel::Mask kMask, typename Index>
constexpr BlockRange query_blocks_seeing(const KeyMask<kMask, true>& mask, Index n0, int seqlen_q) {
  const long long block_end = n0 + kBlockN;
  const long long last_key = (block_end < mask.seqlen_kv ? block_end : mask.seqlen_kv) - 1;
  long long first_row = n0 - mask.diag - mask.right;
  long long last_row = last_key - mask.diag + mask.left;
  if (first_row < 0) first_row = 0;
  if (last_row >= seqlen_q) last_row = seqlen_q - 1LL;
  if (first_row > last_row) return {0, 0};
  return {static_cast<int>(first_row / kBlockM), static_cast<int>(last_row / kBlockM) + 1};
}

// The key blocks of kBlockN keys that the query rows [row_begin, row_end) see: from the one holding the first
// row's first key to the one holding the last row's last key (rows that see none lie only before or after
// the rows that see some, and add nothing). Rows past seqlen_q count, as in key_blocks_seen above.
template <int kBlockN, kernel::Mask kMask>
constexpr BlockRange key_blocks_seen(const KeyMask<kMask, true>& mask, long long row_begin,
                                     long long row_end) {
  const long long first = mask.first_visible(row_begin);
  const long long last = mask.last_visible(row_end - 1);
  if (first > last) return {0, 0};
  return {static_cast<int>(first / kBlockN), static_cast<int>(last / kBlockN) + 1};
}

}  // namespace flashrtc

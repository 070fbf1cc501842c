#pragma once
// Which keys a query row sees, for every kernel family: key `col` is visible to query `row` iff
// col < seqlen_kv and, under a causal mask, col <= row + diag (diag: mask_diag in block_ranges.cuh, 0 causal
// top-left, seqlen_kv - seqlen_q otherwise). KeyMask<kMask, true> adds a sliding window around the diagonal:
// row + diag - window_left <= col <= row + diag + window_right, -1 leaving a side unbounded
// (flashrtc::mask_allows on the host is the definition the CPU tests hold both to). A row's visible keys are
// one run [first_visible, last_visible] (empty when first > last), and both ends only grow with the row.
// Compiled by NVRTC and by the host compiler (tests/cpu/test_block_ranges.cpp).
#include "flashrtc/forward_params.cuh"
#include "flashrtc/host_device.cuh"

namespace flashrtc {

// The device's min (the code the Hopper forward was measured with; a compare and select comes out in another
// order), a plain one on the host.
#ifdef __CUDACC_RTC__
__device__ __forceinline__ long long smaller_key(long long a, long long b) {
  return min(a, b);
}
#else
constexpr long long smaller_key(long long a, long long b) {
  return a < b ? a : b;
}
#endif

template <kernel::Mask kMask, bool kWindow = false>
struct KeyMask {
  static constexpr bool kCausal = kMask != kernel::Mask::kNone;
  int seqlen_kv;
  long long diag;

  // Whether key col is hidden from query row.
  FLASHRTC_DEVICE_INLINE constexpr bool hides(long long row, long long col) const {
    return col >= seqlen_kv || (kCausal && col > row + diag);
  }
  // The first key query `row` sees (the window's form; this mask hides no key before the last).
  FLASHRTC_DEVICE_INLINE constexpr long long first_visible(long long) const { return 0; }
  // The last key query `row` sees; below 0 when it sees none. hides(row, col) == (col > last_visible(row)).
  FLASHRTC_DEVICE_INLINE long long last_visible(long long row) const {
    const long long last_key = static_cast<long long>(seqlen_kv) - 1;
    return kCausal ? smaller_key(last_key, row + diag) : last_key;
  }
  // Whether the key tile [n0, n0 + block_n) hides any key from any query row at or after m0 (row m0 sees the
  // fewest keys): only such tiles pay for the mask.
  FLASHRTC_DEVICE_INLINE constexpr bool tile_needs_mask(long long m0, long long n0, int block_n) const {
    return n0 + block_n > seqlen_kv || (kCausal && n0 + block_n - 1 > m0 + diag);
  }
  // The window's form, for code written for both: the rows [m0, m0 + block_m).
  FLASHRTC_DEVICE_INLINE constexpr bool tile_needs_mask(long long m0, int, long long n0, int block_n) const {
    return tile_needs_mask(m0, n0, block_n);
  }

  // hides() for the tile of queries from m0 and keys from n0, in tile-local 32-bit coordinates (row - m0,
  // col - n0, both in [0, 256)): two registers and 32-bit compares in the inner loop (the backward kernels).
  struct Local {
    int cols_left;    // keys of the tile before seqlen_kv
    int diag_offset;  // col_local > row_local + diag_offset is hidden (causal)
    FLASHRTC_DEVICE_INLINE constexpr bool hides(int row_local, int col_local) const {
      return col_local >= cols_left || (kCausal && col_local > row_local + diag_offset);
    }
  };
  FLASHRTC_DEVICE_INLINE constexpr Local local(long long m0, long long n0) const {
    constexpr long long kBound = 1 << 20;  // beyond the tile's extent either way: same answers, fits an int
    const long long left = seqlen_kv - n0;
    const long long offset = m0 + diag - n0;
    return {static_cast<int>(left < kBound ? left : kBound), static_cast<int>(offset < -kBound  ? -kBound
                                                                              : offset > kBound ? kBound
                                                                                                : offset)};
  }
};

// Under a sliding window: the bounds either side of the diagonal, run-time values (the kernel's window
// switch is the compile-time kWindow). A causal mask is the window's right bound at 0 (a wider right bound
// changes nothing); an unbounded side is a bound no row and key reach, so hides() needs no branch on it.
template <kernel::Mask kMask>
struct KeyMask<kMask, true> {
  static constexpr bool kCausal = kMask != kernel::Mask::kNone;
  // Past any |row + diag| (rows and keys are ints): row + diag -/+ it stays a long long.
  static constexpr long long kUnbounded = 1LL << 40;
  int seqlen_kv;
  long long diag;
  long long left;   // key col < row + diag - left is hidden
  long long right;  // key col > row + diag + right is hidden

  // window_left, window_right: -1 (unbounded) or >= 0.
  FLASHRTC_DEVICE_INLINE constexpr KeyMask(int seqlen_kv_, long long diag_, int window_left, int window_right)
      : seqlen_kv(seqlen_kv_),
        diag(diag_),
        left(window_left < 0 ? kUnbounded : window_left),
        right(kCausal            ? 0
              : window_right < 0 ? kUnbounded
                                 : window_right) {}

  FLASHRTC_DEVICE_INLINE constexpr bool hides(long long row, long long col) const {
    return col >= seqlen_kv || col > row + diag + right || col < row + diag - left;
  }
  // The first and last keys query `row` sees, in [0, seqlen_kv) unless it sees none (first > last); both are
  // non-decreasing in row. hides(row, col) == (col < first_visible(row) || col > last_visible(row)).
  FLASHRTC_DEVICE_INLINE constexpr long long first_visible(long long row) const {
    const long long first = row + diag - left;
    return first > 0 ? first : 0;
  }
  FLASHRTC_DEVICE_INLINE constexpr long long last_visible(long long row) const {
    const long long last = row + diag + right, last_key = static_cast<long long>(seqlen_kv) - 1;
    return last < last_key ? last : last_key;
  }
  // Whether the key tile [n0, n0 + block_n) hides any key from any query row of [m0, m0 + block_m): row m0
  // sees the fewest keys at the right, the last row the fewest at the left. Only such tiles pay for the mask.
  FLASHRTC_DEVICE_INLINE constexpr bool tile_needs_mask(long long m0, int block_m, long long n0,
                                                        int block_n) const {
    return n0 + block_n - 1 > last_visible(m0) || n0 < first_visible(m0 + block_m - 1);
  }

  // hides() in tile-local 32-bit coordinates, as KeyMask<kMask>::Local: three registers.
  struct Local {
    int cols_left;     // keys of the tile before seqlen_kv
    int right_offset;  // col_local > row_local + right_offset is hidden
    int left_offset;   // col_local < row_local + left_offset is hidden
    FLASHRTC_DEVICE_INLINE constexpr bool hides(int row_local, int col_local) const {
      return col_local >= cols_left || col_local > row_local + right_offset ||
             col_local < row_local + left_offset;
    }
  };
  FLASHRTC_DEVICE_INLINE constexpr Local local(long long m0, long long n0) const {
    return {clamp_local(seqlen_kv - n0), clamp_local(m0 + diag + right - n0),
            clamp_local(m0 + diag - left - n0)};
  }

 private:
  // Beyond a tile's extent either way: the same answers, and fits an int.
  FLASHRTC_DEVICE_INLINE static constexpr int clamp_local(long long x) {
    constexpr long long kBound = 1 << 20;
    return static_cast<int>(x < -kBound ? -kBound : x > kBound ? kBound : x);
  }
};

}  // namespace flashrtc

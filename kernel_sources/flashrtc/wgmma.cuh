#pragma once
// Warpgroup matrix multiply-accumulate (sm_90a): shared-memory matrix descriptors for the 128-byte and
// 64-byte swizzled layouts TMA writes, and the fence / commit / wait protocol around wgmma.mma_async.
//
// One wgmma is issued by all 128 threads of a warp group for a 64 x N x 16 product. Its fp32 accumulator
// is N / 2 registers per thread: warp w of the group holds rows 16w .. 16w + 15; register i of a lane holds
// row lane / 4 + 8 * ((i / 2) % 2), column 8 * (i / 4) + 2 * (lane % 4) + i % 2. The A operand from
// registers (the "rs" form) has mma.sync's m16n8k16 A-fragment layout, so an accumulator pair packed to
// 16 bits is an A register as it stands: the 8 accumulators of columns [16k, 16k + 16) are step k's A.
#include "flashrtc/mma.cuh"
#include "flashrtc/wgmma_instructions.cuh"

namespace flashrtc {

// An fp32 accumulator of 16 * kSteps columns packed to 16 bits: frag[k] is step k's A operand of an rs-form
// wgmma (the layout above).
template <typename T, int kSteps>
__device__ __forceinline__ void pack_a_fragments(const float (&acc)[8 * kSteps], unsigned (&frag)[kSteps][4]) {
#pragma unroll
  for (int step = 0; step < kSteps; ++step)
#pragma unroll
    for (int r = 0; r < 4; ++r) frag[step][r] = pack2<T>(acc[8 * step + 2 * r], acc[8 * step + 2 * r + 1]);
}

// Stores four 8x8 b16 matrices (sm_90): register i of a lane holds row lane / 4, columns 2 * (lane % 4) + {0, 1}
// of matrix i; lanes 8i..8i+7 give the addresses of matrix i's rows, each stored as one contiguous 16-byte row.
__device__ __forceinline__ void stmatrix_x4(unsigned address, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Stores four 8x8 b16 matrices transposed (sm_90): register i of a lane holds row lane / 4, columns
// 2 * (lane % 4) + {0, 1} of matrix i; lanes 8i..8i+7 give the addresses of matrix i's columns, each
// stored as one contiguous 16-byte row.
__device__ __forceinline__ void stmatrix_x4_trans(unsigned address, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// A panel is a tile's slice of kPanelBytes-wide rows (the swizzle span), rows stored one after the other;
// a tile of a wider head dim is several panels back to back. 8 rows of a panel form one swizzle atom.
template <int kPanelBytes>
struct SwizzledPanel {
  static_assert(kPanelBytes == 128 || kPanelBytes == 64, "128-byte or 64-byte swizzle");
  static constexpr int kAtomBytes = 8 * kPanelBytes;
  // Descriptor layout-type field: 1 = 128-byte swizzle, 2 = 64-byte swizzle.
  static constexpr unsigned long long kLayoutType = kPanelBytes == 128 ? 1ull : 2ull;

  // Byte offset of byte `col_byte` of row `row` inside a panel: TMA's swizzle XORs the 16-byte chunk index
  // (address bits 4..6, or 4..5) with bits 7..9 (7..8) of the address.
  __device__ __forceinline__ static unsigned offset(int row, int col_byte) {
    constexpr unsigned kMask = kPanelBytes == 128 ? 7u : 3u;
    const unsigned linear = unsigned(row * kPanelBytes + col_byte);
    return linear ^ (((linear >> 7) & kMask) << 4);
  }
};

// The matrix descriptor of a swizzled tile at shared address `address` (1024-byte aligned atoms; the
// address may step inside an atom along the contiguous dimension). K-major (rows of the contiguous K
// dimension, Q and K): atoms of 8 rows are stride_bytes apart; leading_bytes is unused by the hardware.
// MN-major (rows of K with MN contiguous, V as the B operand of P V): 8-row atoms along K are stride_bytes
// apart and MN panels leading_bytes apart.
template <int kPanelBytes>
__device__ __forceinline__ unsigned long long make_smem_descriptor(unsigned address, unsigned leading_bytes,
                                                                   unsigned stride_bytes) {
  unsigned long long desc = 0;
  desc |= static_cast<unsigned long long>((address & 0x3FFFF) >> 4);
  desc |= static_cast<unsigned long long>((leading_bytes & 0x3FFFF) >> 4) << 16;
  desc |= static_cast<unsigned long long>((stride_bytes & 0x3FFFF) >> 4) << 32;
  desc |= SwizzledPanel<kPanelBytes>::kLayoutType << 62;
  return desc;
}

// The descriptor of the tile `bytes` past desc's start. The start field holds address >> 4 of a shared address
// below 256 KiB, so the add never carries out of it: one add on the low word, where make_smem_descriptor for
// each address masks, shifts and ORs again.
__device__ __forceinline__ unsigned long long advance_descriptor(unsigned long long desc, unsigned bytes) {
  const unsigned low = static_cast<unsigned>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | low;
}

// Before the first wgmma of a batch: orders earlier register and shared-memory writes before wgmma reads.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending committed groups of this warp group are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Ties registers a running wgmma reads or writes to this point of the program, so the compiler neither
// reads accumulators before the wait nor reuses A registers while the product may still read them.
template <int N>
__device__ __forceinline__ void wgmma_hold(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void wgmma_hold(unsigned (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

}  // namespace flashrtc

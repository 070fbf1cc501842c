#pragma once
// Where the backward's fp32 dQ workspace keeps dQ's element (query, column) of a (batch, query head), for the
// kernels that add into it (constexpr and device code, for NVRTC and the host compiler).
//
// With dq_tile_rows = 0, row-major [batch, heads_q, seqlen_q, head_dim] (the mma.sync and CUDA-core main
// kernels' atomics). Otherwise the fused Hopper kernel's: each (batch, head)'s queries in tiles of
// dq_tile_rows (the last one padded), each tile one contiguous run in the order its wgmma accumulators leave
// the registers, so that a warp's shared-memory stores fill whole lines and the tile leaves by one bulk
// reduce-add. For 64 queries (wgmma's M) x head_dim columns, thread t of the warp group holds float2 number
// 2 * (column / 8) + (query % 16) / 8, t = 32 * (query / 16) + 4 * (query % 8) + (column % 8) / 2; float2 i of
// thread t is float2 i * 128 + t of the 64-query slice, and the slices of a tile follow one another.

// Host and device functions alike: NVRTC defines __CUDACC_RTC__; the host compiler sees plain constexpr.
#ifdef __CUDACC_RTC__
#define FLASHRTC_HOST_DEVICE __host__ __device__
#else
#define FLASHRTC_HOST_DEVICE
#endif

namespace flashrtc {

// Queries of one slice of the fused layout (wgmma's M): a tile is a whole number of slices, each one contiguous
// run of 64 x head_dim floats.
constexpr int kDqSliceRows = 64;

// Floats into a tile of the fused layout of float2 number `pair` of thread `thread` (of 128) in 64-query slice
// `slice`: how the kernel that writes it counts.
FLASHRTC_HOST_DEVICE constexpr int dq_tile_fragment_offset(int slice, int pair, int thread, int head_dim) {
  return 2 * ((slice * (head_dim / 4) + pair) * 128 + thread);
}

// Floats into a tile of the fused layout of (query, column): how the kernels that read it count.
FLASHRTC_HOST_DEVICE constexpr int dq_tile_offset(int query_in_tile, int column, int head_dim) {
  const int q = query_in_tile % 64;
  const int thread = 32 * (q / 16) + 4 * (q % 8) + (column % 8) / 2;
  return dq_tile_fragment_offset(query_in_tile / 64, 2 * (column / 8) + (q % 16) / 8, thread, head_dim) +
         column % 2;
}

// The query and first column of float2 number `index` of a 64-query slice (dq_tile_fragment_offset's thread
// and pair, inverted): how the conversion, reading a slice in order, finds where each float2 goes. Float2
// numbers 2i and 2i + 1 (threads t and t + 1, t even) are columns [column, column + 4) of one query.
struct DqSlicePosition {
  int query, column;
};
FLASHRTC_HOST_DEVICE constexpr DqSlicePosition dq_slice_position(int index) {
  const int pair = index / 128, thread = index % 128;
  return {16 * (thread / 32) + 8 * (pair % 2) + (thread % 32) / 4, 8 * (pair / 2) + 2 * (thread % 4)};
}

// Floats of the workspace for batch * heads_q query heads of seqlen_q queries.
FLASHRTC_HOST_DEVICE constexpr long long dq_accum_floats(long long heads, long long seqlen_q, int head_dim,
                                                        int tile_rows) {
  const long long rows = tile_rows == 0 ? seqlen_q : (seqlen_q + tile_rows - 1) / tile_rows * tile_rows;
  return heads * rows * head_dim;
}

// Floats into the workspace of (query, column) of query head `head` = batch * heads_q + head index.
FLASHRTC_HOST_DEVICE constexpr long long dq_accum_offset(long long head, long long query, int column,
                                                       long long seqlen_q, int head_dim, int tile_rows) {
  if (tile_rows == 0) return (head * seqlen_q + query) * head_dim + column;
  const long long tiles = (seqlen_q + tile_rows - 1) / tile_rows;
  return (head * tiles + query / tile_rows) * tile_rows * head_dim +
         dq_tile_offset(static_cast<int>(query % tile_rows), column, head_dim);
}

}  // namespace flashrtc

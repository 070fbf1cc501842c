#pragma once
// Thread layout of the row kernels (the backward's row passes, the KV append, the decode combine and
// merge_states): block_m rows per thread block, one warp per row at a time (the append: 16 bytes per thread).
// They have no key tile and no pipeline: block_n and stages are 1. Compiled by NVRTC and by the host compiler
// alike.

namespace flashrtc {

struct RowsShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  constexpr unsigned smem_bytes() const { return 0u; }

  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
      return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps: must be 1, 2, 4 or 8";
    if (block_m < warps || block_m % warps != 0 || block_m > 256)
      return "block_m: rows per block, a multiple of warps up to 256";
    if (block_n != 1) return "block_n: a row pass has no key tile, must be 1";
    if (stages != 1) return "stages: a row pass has no pipeline, must be 1";
    return nullptr;
  }
};

}  // namespace flashrtc

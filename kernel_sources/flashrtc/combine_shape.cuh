#pragma once
// Thread layout of the decode combine (decode_combine.cuh): block_m output rows per thread block, one after
// another, each by all of its warps, which share out the row's splits (a row of a long sequence may have
// a hundred; one warp alone would wait on them in turn). No key tile, no pipeline: block_n and stages are 1.
// Compiled by NVRTC and by the host compiler alike.

namespace flashrtc {

struct CombineShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  constexpr int head_dim_padded() const { return (head_dim + 127) / 128 * 128; }  // 32 lanes x 4 columns
  // Each warp's sum of its splits, then the row's lse weights (one per split).
  constexpr unsigned smem_bytes() const { return unsigned(warps) * unsigned(head_dim_padded()) * 4u; }

  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0) return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps: must be 1, 2, 4 or 8";
    if (block_m != 1 && block_m != 2 && block_m != 4 && block_m != 8) return "block_m: rows per block, 1, 2, 4 or 8";
    if (block_n != 1) return "block_n: the combine has no key tile, must be 1";
    if (stages != 1) return "stages: the combine has no pipeline, must be 1";
    return nullptr;
  }
};

}  // namespace flashrtc

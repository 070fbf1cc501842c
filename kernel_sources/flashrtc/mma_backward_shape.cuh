#pragma once
// Warp layout, register budget and shared-memory plans of the tensor-core (mma.sync) backward kernels, as
// constexpr arithmetic on integers. Compiled by NVRTC (the kernels static_assert invalid_reason() == nullptr)
// and by the host compiler (config checks, launch sizes), so the two sides cannot disagree.

namespace flashrtc {

// Shared-memory rows of a [rows, head_dim] 16-bit tile: the head dim padded to 16 (one k-step of mma.sync),
// or to 32 above 128 so that two warps can split it into 16-column slices (d = 200 has 13 of 16 columns),
// rows padded by one 16-byte chunk to an odd pitch so that the 8 rows one ldmatrix reads hit 8 distinct
// 16-byte bank groups.
struct MmaTileRows {
  int head_dim;
  constexpr int head_dim_padded() const {
    return head_dim > 128 ? (head_dim + 31) / 32 * 32 : (head_dim + 15) / 16 * 16;
  }
  constexpr int chunks() const { return head_dim_padded() / 8; }
  constexpr int pitch_chunks() const { return chunks() + 1; }
  constexpr unsigned row_bytes() const { return unsigned(pitch_chunks()) * 16u; }
};

// The main kernel: one thread block per (batch, kv head, block_n keys). Each warp owns 16 keys and a slice of
// the head dim of their dK and dV accumulators: block_n / 16 key slices, warps / (block_n / 16) dim slices
// (S^T and dP^T are computed by every warp of a key slice; the split keeps d = 256 in registers). Query
// blocks of block_m rows (Q, dO, lse, D) stream through `stages` buffers.
struct MmaBackwardShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  constexpr MmaTileRows rows() const { return {head_dim}; }
  constexpr int key_slices() const { return block_n / 16; }
  constexpr int dim_split() const { return key_slices() > 0 ? warps / key_slices() : 0; }
  constexpr int dim_slice() const { return dim_split() > 0 ? rows().head_dim_padded() / dim_split() : 0; }
  // Per-thread fp32 accumulators: dK and dV (16 x dim_slice each), S^T and dP^T (16 x block_m each).
  constexpr int accumulator_floats() const { return dim_slice() + block_m; }
  // dS^T in 16 bits, [block_n keys, block_m queries], for dQ = dS K; rows padded to an odd pitch.
  constexpr unsigned ds_row_bytes() const { return unsigned(block_m / 8 + 1) * 16u; }

  constexpr unsigned kv_smem_bytes() const { return 2u * unsigned(block_n) * rows().row_bytes(); }
  // Q and dO rows, then lse (log2 domain) and D of each row.
  constexpr unsigned stage_bytes() const {
    return 2u * unsigned(block_m) * rows().row_bytes() + 8u * block_m;
  }
  constexpr unsigned ds_smem_bytes() const { return unsigned(block_n) * ds_row_bytes(); }
  constexpr unsigned smem_bytes() const {
    return kv_smem_bytes() + unsigned(stages) * stage_bytes() + ds_smem_bytes();
  }

  // nullptr when the kernel can be instantiated with this shape, else which field is wrong and why.
  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
      return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps: must be 1, 2, 4 or 8";
    if (stages != 1 && stages != 2) return "stages: must be 1 or 2";
    if (block_m < 16 || block_m > 128 || block_m % 16 != 0)
      return "block_m: must be a multiple of 16 in [16, 128]";
    if (block_n < 16 || block_n % 16 != 0 || warps % key_slices() != 0)
      return "block_n: must be 16 keys per warp times a divisor of warps (block_n = 16 * warps / dim split)";
    if (rows().head_dim_padded() % (16 * dim_split()) != 0)
      return "warps: the head dim (padded to 16) must split into 16-column slices, one per warp of a key "
             "slice";
    // dK, dV, S^T and dP^T beyond 192 floats leave too few of the 255 registers for fragments and addresses.
    if (accumulator_floats() > 192)
      return "block_m/block_n: the register tile exceeds 192 accumulators per thread";
    return nullptr;
  }
};

// The deterministic dQ kernel: one thread block per (batch, query head, block_m queries), each warp owning 16
// of its rows; key blocks of block_n rows (K and V) stream through `stages` buffers.
struct MmaBackwardDqShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  constexpr MmaTileRows rows() const { return {head_dim}; }
  // Per-thread fp32 accumulators: dQ (16 x head_dim), S and dP (16 x block_n each).
  constexpr int accumulator_floats() const { return rows().head_dim_padded() / 2 + block_n; }

  // Q and dO rows, then lse (log2 domain) and D of each row.
  constexpr unsigned q_smem_bytes() const {
    return 2u * unsigned(block_m) * rows().row_bytes() + 8u * block_m;
  }
  constexpr unsigned kv_stage_bytes() const { return 2u * unsigned(block_n) * rows().row_bytes(); }
  constexpr unsigned smem_bytes() const { return q_smem_bytes() + unsigned(stages) * kv_stage_bytes(); }

  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
      return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps: must be 1, 2, 4 or 8";
    if (stages != 1 && stages != 2) return "stages: must be 1 or 2";
    if (block_m != 16 * warps) return "block_m: must be 16 query rows per warp (block_m = 16 * warps)";
    if (block_n < 16 || block_n > 256 || block_n % 16 != 0)
      return "block_n: must be a multiple of 16 in [16, 256]";
    if (accumulator_floats() > 192) return "block_n: the register tile exceeds 192 accumulators per thread";
    return nullptr;
  }
};

}  // namespace flashrtc

#pragma once
// Warp layout, register budget and shared-memory plan of the tensor-core (mma.sync) forward kernel, as
// constexpr arithmetic on integers. Compiled by NVRTC (the kernel static_asserts invalid_reason() == nullptr)
// and by the host compiler (config checks, launch sizes), so the two sides cannot disagree.

namespace flashrtc {

struct MmaForwardShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  // Q K^T steps through the head dim 16 at a time; columns past head_dim are zero-filled in shared memory.
  constexpr int head_dim_padded() const { return (head_dim + 15) / 16 * 16; }
  constexpr int chunks() const { return head_dim_padded() / 8; }  // 16-byte chunks per row (8 elements)
  // Rows of 8k chunks use an XOR swizzle (chunk ^ row % 8); others are padded by one chunk to an odd pitch.
  // Either way the 8 rows one ldmatrix reads, and the 8 chunks of a row cp.async writes, hit 8 distinct
  // 16-byte bank groups.
  constexpr bool swizzled() const { return chunks() % 8 == 0; }
  constexpr int pitch_chunks() const { return swizzled() ? chunks() : chunks() + 1; }
  // Each warp owns m_tiles stacked 16-row slices of the block's queries.
  constexpr int m_tiles() const { return block_m / (16 * warps); }
  // Per-thread registers of the fp32 accumulators: O is m_tiles x 16 x head_dim_padded, S is m_tiles x 16 x
  // block_n, spread over 32 lanes.
  constexpr int o_floats() const { return m_tiles() * head_dim_padded() / 2; }
  constexpr int s_floats() const { return m_tiles() * block_n / 2; }
  constexpr int q_registers() const { return m_tiles() * head_dim_padded() / 4; }
  // Q fragments stay in registers for the whole loop when they fit beside the accumulators; otherwise each
  // k-step reloads them from shared memory (FlashAttention-2's choice at d = 128 with 32 rows per warp).
  constexpr bool q_in_registers() const { return o_floats() + s_floats() + q_registers() <= 128; }

  constexpr unsigned row_bytes() const { return unsigned(pitch_chunks()) * 16u; }
  constexpr unsigned q_smem_bytes() const { return unsigned(block_m) * row_bytes(); }
  constexpr unsigned kv_stage_bytes() const { return unsigned(block_n) * row_bytes(); }
  constexpr unsigned smem_bytes() const { return q_smem_bytes() + 2u * unsigned(stages) * kv_stage_bytes(); }

  // nullptr when the kernel can be instantiated with this shape, else which field is wrong and why.
  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0) return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps: must be 1, 2, 4 or 8";
    if (stages != 1 && stages != 2) return "stages: must be 1 or 2";
    if (block_m % (16 * warps) != 0 || m_tiles() < 1 || m_tiles() > 2)
      return "block_m: must be 16 or 32 query rows per warp (block_m = 16 * warps or 32 * warps)";
    if (block_n < 16 || block_n > 256 || block_n % 16 != 0) return "block_n: must be a multiple of 16 in [16, 256]";
    // O and S accumulators beyond 192 floats leave too few of the 255 registers for fragments and addresses.
    if (o_floats() + s_floats() > 192) return "block_m/block_n: the register tile exceeds 192 accumulators per thread";
    return nullptr;
  }
};

}  // namespace flashrtc

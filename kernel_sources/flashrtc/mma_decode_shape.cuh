#pragma once
// Warp layout, registers and shared memory of the tensor-core decode kernel (attention_decode_mma.cuh), as
// constexpr arithmetic compiled by NVRTC (the kernel static_asserts invalid_reason() == nullptr) and by the
// host compiler (config checks, launch sizes).
//
// A block owns block_m packed rows (query heads of one KV head times query tokens) and streams its split's
// keys in tiles of block_n. Its warps form row_groups() x key_groups(): each warp holds one 16-row slice and
// takes block_n / key_groups() keys of every tile, with its own softmax state; the key groups' states merge
// through shared memory once, at the end.

namespace flashrtc {

struct MmaDecodeShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  constexpr int head_dim_padded() const { return (head_dim + 15) / 16 * 16; }
  constexpr int chunks() const { return head_dim_padded() / 8; }  // 16-byte chunks per row
  // Rows of 8k chunks are XOR-swizzled (chunk ^ row % 8), others padded to an odd pitch: the 8 rows one
  // ldmatrix reads land in 8 distinct bank groups either way.
  constexpr bool swizzled() const { return chunks() % 8 == 0; }
  constexpr int pitch_chunks() const { return swizzled() ? chunks() : chunks() + 1; }
  constexpr int row_groups() const { return block_m / 16; }
  constexpr int key_groups() const { return warps / row_groups(); }
  constexpr int warp_keys() const { return block_n / key_groups(); }  // keys of a tile per warp
  constexpr int o_floats() const { return head_dim_padded() / 2; }     // per thread: a 16 x d accumulator
  constexpr int q_registers() const { return head_dim_padded() / 4; }
  // Q's fragments stay in registers when they fit beside the accumulators; else each k-step reloads them.
  constexpr bool q_in_registers() const { return o_floats() + warp_keys() / 2 + q_registers() <= 160; }

  constexpr unsigned row_bytes() const { return unsigned(pitch_chunks()) * 16u; }
  constexpr unsigned q_smem_bytes() const { return unsigned(block_m) * row_bytes(); }
  constexpr unsigned kv_stage_bytes() const { return unsigned(block_n) * row_bytes(); }
  // Per stage, one byte per key: whether its page is outside the cache (hidden).
  constexpr unsigned hidden_bytes() const { return unsigned(stages) * unsigned(block_n); }
  constexpr unsigned pipeline_bytes() const {
    return q_smem_bytes() + 2u * unsigned(stages) * kv_stage_bytes() + hidden_bytes();
  }
  // The end merge, in the pipeline's space: each warp's unnormalized O (fp32, rows padded by 4 floats so the
  // fragment stores spread over banks) and its rows' max and sum.
  constexpr int merge_pitch() const { return head_dim_padded() + 4; }
  constexpr unsigned merge_warp_floats() const { return 16u * unsigned(merge_pitch()) + 32u; }
  constexpr unsigned merge_bytes() const { return unsigned(warps) * merge_warp_floats() * 4u; }
  constexpr unsigned smem_bytes() const {
    const unsigned p = (pipeline_bytes() + 15u) / 16u * 16u;
    return merge_bytes() > p ? merge_bytes() : p;
  }

  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0) return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps: must be 1, 2, 4 or 8";
    if (stages < 2 || stages > 4) return "stages: must be 2, 3 or 4";
    if (block_m != 16 && block_m != 32 && block_m != 64) return "block_m: must be 16, 32 or 64 packed rows";
    if (warps % row_groups() != 0) return "warps: must be a multiple of block_m / 16 (one 16-row slice per warp)";
    if (block_n < 16 || block_n > 256 || block_n % 16 != 0) return "block_n: must be a multiple of 16 in [16, 256]";
    if (warp_keys() % 16 != 0)
      return "block_n: each warp's keys (block_n * block_m / (16 * warps)) must be a multiple of 16";
    if (o_floats() + warp_keys() / 2 > 160) return "block_n: the register tile exceeds 160 accumulators per thread";
    return nullptr;
  }
};

}  // namespace flashrtc

#pragma once
// Thread layout, registers and shared memory of the SIMT decode kernel (attention_decode_simt.cuh), as
// constexpr arithmetic compiled by NVRTC (the kernel static_asserts invalid_reason() == nullptr) and by the
// host compiler (config checks, launch sizes).
//
// A head-dim row is split into 4-element vectors (16 bytes of fp32, 8 of fp16 / bf16: one layout for every
// element type, so a tile is valid for all of them). row_lanes() adjacent lanes span a row, each holding at
// most two vectors of q for every packed row of the block and of its O accumulators; the block's threads form
// key_groups() groups of row_lanes() lanes, each taking keys_per_thread() keys of every key tile with its own
// softmax state. The groups' states merge through shared memory once, at the end.

namespace flashrtc {

struct SimtDecodeShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  constexpr int chunks() const { return head_dim / 4; }  // 4-element vectors of a row
  // The fewest lanes (a power of two from 4 to 32) that leave each at most two vectors of a row: few lanes
  // per row mean few shuffles per score, two vectors bound q and O to 8 floats per row per thread.
  constexpr int row_lanes() const {
    int n = 4;
    while (n < 32 && 2 * n < chunks()) n *= 2;
    return n;
  }
  constexpr int vectors() const { return (chunks() + row_lanes() - 1) / row_lanes(); }  // per lane
  constexpr int key_groups() const { return threads() / row_lanes(); }
  constexpr int keys_per_thread() const { return block_n / key_groups(); }
  // Registers of data per thread: q and O (block_m rows of 4 * vectors()), the scores of its keys, and
  // `stages` tiles' K and V vectors (4 registers each for fp32, the widest).
  constexpr int register_floats() const {
    return block_m * (2 * 4 * vectors() + keys_per_thread()) + stages * keys_per_thread() * vectors() * 8;
  }

  // The end merge: each key group's unnormalized O, row max and row sum, fp32.
  constexpr unsigned smem_bytes() const {
    return unsigned(key_groups()) * unsigned(block_m) * unsigned(head_dim + 2) * 4u;
  }

  // nullptr when the kernel can be instantiated with this shape, else which field is wrong and why.
  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
      return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps: must be 1, 2, 4 or 8";
    if (stages != 1 && stages != 2) return "stages: must be 1 or 2 (key tiles loaded ahead into registers)";
    if (block_m < 1 || block_m > 16) return "block_m: must be 1 to 16 packed rows";
    if (block_n < key_groups() || block_n % key_groups() != 0)
      return "block_n: must be a multiple of the key groups (warps * 32 / lanes per row)";
    if (keys_per_thread() > 8) return "block_n: more than 8 keys per thread";
    // ptxas allocates about 1.25 registers per float of this estimate: 160 lands near 200 of the 248 a
    // default may use (NVRTC 13, sm_80 and sm_90a); 176 (8 rows of 8 floats, one stage) already took 252.
    if (register_floats() > 160)
      return "block_m/block_n/stages: the register tile exceeds 160 floats per thread";
    return nullptr;
  }
};

}  // namespace flashrtc

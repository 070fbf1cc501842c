#pragma once
// Thread layout and shared-memory plan of the SIMT forward kernel (fp32 inputs: fp16 and bf16 run on the
// tensor-core kernel), as constexpr arithmetic on integers. Compiled by NVRTC (the kernel static_asserts
// invalid_reason() == nullptr) and by the host compiler (the runtime's config checks and launch sizes), so
// the two sides cannot disagree.

namespace flashrtc {

struct SimtForwardShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  // Threads sharing a query row. 16 lets d = 64, 128, 256 split into float4 columns; other head dims use 8
  // so that d / 8 stays whole. Either divides a warp, so row reductions are warp shuffles.
  constexpr int row_threads() const { return head_dim % 64 == 0 ? 16 : 8; }
  constexpr int row_groups() const { return threads() / row_threads(); }
  constexpr int rows_per_thread() const { return block_m / row_groups(); }
  constexpr int cols_per_thread() const { return block_n / row_threads(); }   // of S = Q K^T
  constexpr int dims_per_thread() const { return head_dim / row_threads(); }  // of the O accumulator
  constexpr int vec() const { return dims_per_thread() % 4 == 0 ? 4 : dims_per_thread() % 2 == 0 ? 2 : 1; }
  // Rows of Q, K, V in shared memory (floats) are padded by 16 bytes: cp.async needs 16-byte aligned rows,
  // and the pad moves consecutive rows to different banks.
  constexpr int row_pitch() const { return head_dim + 4; }
  constexpr int p_pitch() const { return block_n + 4; }
  // Accumulators per thread: O, S and the K/Q fragments of one k-step must stay in registers.
  constexpr int accumulator_floats() const {
    return rows_per_thread() * (dims_per_thread() + cols_per_thread());
  }

  constexpr unsigned q_smem_bytes() const { return unsigned(block_m) * row_pitch() * 4u; }
  constexpr unsigned kv_stage_bytes() const { return unsigned(block_n) * row_pitch() * 4u; }
  constexpr unsigned p_smem_bytes() const { return unsigned(block_m) * p_pitch() * 4u; }
  constexpr unsigned smem_bytes() const {
    return q_smem_bytes() + 2u * unsigned(stages) * kv_stage_bytes() + p_smem_bytes();
  }

  // nullptr when the kernel can be instantiated with this shape, else which field is wrong and why.
  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
      return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8 && warps != 16)
      return "warps: must be 1, 2, 4, 8 or 16";
    if (stages != 1 && stages != 2) return "stages: must be 1 or 2";
    if (block_m < row_groups() || block_m % row_groups() != 0)
      return "block_m: must be a multiple of the row groups (warps * 32 / threads per row)";
    if (rows_per_thread() > 16) return "block_m: more than 16 query rows per thread";
    if (block_n < row_threads() || block_n % row_threads() != 0 || block_n % 4 != 0)
      return "block_n: must be a multiple of the threads per row (8 or 16) and of 4";
    if (cols_per_thread() > 16) return "block_n: more than 16 key columns per thread";
    // 128 accumulator floats plus fragments and addresses fit the 255 registers a thread can have; more
    // spills.
    if (accumulator_floats() > 128)
      return "block_m/block_n: the register tile exceeds 128 accumulators per thread";
    return nullptr;
  }
};

}  // namespace flashrtc

#pragma once
// Thread layout and shared-memory plans of the SIMT backward kernels (fp32 inputs, exact fp32 arithmetic;
// fp16 and bf16 run on the tensor-core kernels), as constexpr arithmetic on integers. Compiled by NVRTC (the
// kernels static_assert invalid_reason() == nullptr) and by the host compiler alike.

namespace flashrtc {

// kDq false: the main kernel (one block per block_n keys; each thread owns block_n * head_dim / threads
// elements of dK and as many of dV). kDq true: the deterministic dQ pass (one block per block_m queries; each
// thread owns block_m * head_dim / threads elements of dQ). Both keep Q, dO, K and V rows, the scores of one
// tile and the row statistics in shared memory; one stage (plain loads, no pipeline).
template <bool kDq>
struct SimtBackwardShapeOf {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  // Rows of Q, dO, K, V in floats, padded by 16 bytes so consecutive rows start in different banks.
  constexpr int row_pitch() const { return head_dim + 4; }
  // The score tiles: [block_n keys][block_m queries] for the main kernel, [block_m][block_n] for dQ; odd
  // pitch.
  constexpr int score_pitch() const { return (kDq ? block_n : block_m) + 1; }
  constexpr int score_rows() const { return kDq ? block_m : block_n; }
  constexpr int owned_rows() const { return kDq ? block_m : block_n; }
  constexpr int accumulators_per_thread() const {
    return threads() > 0 ? (kDq ? 1 : 2) * owned_rows() * head_dim / threads() : 0;
  }

  constexpr unsigned rows_smem_bytes() const {
    return unsigned(2 * block_m + 2 * block_n) * row_pitch() * 4u;
  }
  // P and dS for the main kernel, dS alone for dQ.
  constexpr unsigned score_smem_bytes() const {
    return unsigned(kDq ? 1 : 2) * score_rows() * score_pitch() * 4u;
  }
  constexpr unsigned smem_bytes() const { return rows_smem_bytes() + score_smem_bytes() + 8u * block_m; }

  constexpr const char* invalid_reason() const {
    if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
      return "head_dim: must be a multiple of 8 in [8, 256]";
    if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps: must be 1, 2, 4 or 8";
    if (stages != 1) return "stages: the SIMT backward kernels have one stage";
    if (block_m < 8 || block_m > 128 || block_m % 8 != 0)
      return "block_m: must be a multiple of 8 in [8, 128]";
    if (block_n < 8 || block_n > 128 || block_n % 8 != 0)
      return "block_n: must be a multiple of 8 in [8, 128]";
    if (owned_rows() * head_dim % threads() != 0)
      return kDq ? "block_m: block_m * head_dim must split evenly over the threads"
                 : "block_n: block_n * head_dim must split evenly over the threads";
    // 128 accumulator floats leave the 255 registers room for addresses and the loop; more spills.
    if (accumulators_per_thread() > 128) return "warps: the accumulators exceed 128 floats per thread";
    return nullptr;
  }
};

using SimtBackwardShape = SimtBackwardShapeOf<false>;
using SimtBackwardDqShape = SimtBackwardShapeOf<true>;

}  // namespace flashrtc

#pragma once
// Roles, register budget and shared-memory plan of the Hopper dQ pass (attention_backward_dq_wgmma.cuh), as
// constexpr arithmetic compiled by NVRTC (the kernel static_asserts invalid_reason() == nullptr) and by the
// host compiler (config checks, launch sizes).

#include "flashrtc/wgmma_panels.cuh"

namespace flashrtc {

struct WgmmaBackwardDqShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  // Warp group 0 produces (TMA loads); each other group consumes 64 query rows (wgmma's M).
  constexpr int consumer_groups() const { return warps / 4 - 1; }
  // setmaxnreg budgets per thread, as the forward's two-consumer split: 128 * (24 + 240 + 240) registers.
  constexpr int consumer_registers() const { return 240; }
  constexpr int producer_registers() const { return 24; }
  // Per-thread accumulators of a consumer: dQ (64 x head_dim), S and dP (64 x block_n each) in fp32, and dS
  // packed to 16 bits (the A fragments of dQ += dS K), which lives while the next S and dP are computed.
  constexpr int accumulator_registers() const { return head_dim / 2 + block_n + block_n / 4; }

  // Rows are cut into swizzle panels (wgmma_panels.cuh).
  constexpr int panel_bytes() const { return wgmma_panel_bytes(head_dim); }
  constexpr int panel_elements() const { return wgmma_panel_elements(head_dim); }
  constexpr int panels() const { return wgmma_panels(head_dim); }

  // One consumer group's Q tile, and as many bytes again for its dO tile.
  constexpr unsigned q_group_bytes() const { return 64u * unsigned(head_dim) * 2u; }
  constexpr unsigned kv_tile_bytes() const { return unsigned(block_n) * unsigned(head_dim) * 2u; }
  // mbarriers: Q-and-dO full per consumer group; K full, V full, K empty, V empty per stage.
  constexpr unsigned barrier_bytes() const { return 8u * unsigned(consumer_groups() + 4 * stages); }
  // 1024 bytes of slack to align the tiles to the 128-byte swizzle's 1024-byte pattern.
  constexpr unsigned smem_bytes() const {
    return 1024u + 2u * unsigned(consumer_groups()) * q_group_bytes() +
           2u * unsigned(stages) * kv_tile_bytes() + barrier_bytes();
  }

  // nullptr when the kernel can be instantiated with this shape, else which field is wrong and why.
  constexpr const char* invalid_reason() const {
    if (head_dim < 64 || head_dim > 128 || head_dim % 32 != 0) return "head_dim: must be 64, 96 or 128";
    if (warps != 8 && warps != 12) return "warps: must be 8 (one consumer warp group) or 12 (two)";
    if (block_m != 64 * consumer_groups())
      return "block_m: must be 64 query rows per consumer warp group (64 with 8 warps, 128 with 12)";
    if (block_n < 16 || block_n > 128 || block_n % 16 != 0)
      return "block_n: must be a multiple of 16 in [16, 128]";
    if (stages < 2 || stages > 4) return "stages: must be 2, 3 or 4";
    // 48 registers for addresses, row statistics, indices and the compiler's temporaries.
    if (accumulator_registers() + 48 > consumer_registers())
      return "block_n/head_dim: dQ, S, dP and dS exceed a consumer warp group's registers";
    return nullptr;
  }
};

}  // namespace flashrtc

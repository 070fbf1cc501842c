#pragma once
// Roles, register budget and shared-memory plan of the Hopper backward main kernel
// (attention_backward_wgmma.cuh), as constexpr arithmetic compiled by NVRTC (the kernel static_asserts
// invalid_reason() == nullptr) and by the host compiler (config checks, launch sizes). accumulates_dq selects
// the fused kernel, which also adds dQ into the fp32 workspace.

#include "flashrtc/wgmma_panels.cuh"

namespace flashrtc {

struct WgmmaBackwardShape {
  int head_dim, block_m, block_n, warps, stages;
  bool accumulates_dq = false;

  constexpr int threads() const { return warps * 32; }
  // Warp group 0 produces (TMA loads); each other group owns 64 keys (wgmma's M).
  constexpr int consumer_groups() const { return warps / 4 - 1; }
  // setmaxnreg budgets per thread: 128 * (40 + 2 * 232) or 128 * (40 + 3 * 152) registers of the SM's 65,536.
  // The producer keeps 40 (the forward's keeps 24): with 24 its walk over the (head, query block) pairs and a
  // statistics warp spilled (the statistics now go to the consumers; 24 was not retried).
  constexpr int consumer_registers() const { return consumer_groups() == 2 ? 232 : 152; }
  constexpr int producer_registers() const { return 40; }
  // Per-thread registers of a consumer's operands: dK and dV (64 keys x head_dim each), S^T and dP^T (64 keys
  // x block_m queries each), and P^T packed to 16 bits while dS^T is formed (dS^T's fragments take S^T's
  // place).
  constexpr int accumulator_registers() const { return head_dim + block_m + block_m / 4; }

  // Whether dV += P^T dO is issued before dS^T is formed, to run beside it: P^T's fragments then stay live
  // beside dS^T's (ptxas for sm_90a spills d = 128 with block_m = 64 that way, not d = 64 with block_m = 96).
  constexpr bool overlap_dv() const {
    return accumulator_registers() + block_m / 4 + 24 <= consumer_registers();
  }

  // Rows are cut into swizzle panels (wgmma_panels.cuh).
  constexpr int panel_bytes() const { return wgmma_panel_bytes(head_dim); }
  constexpr int panel_elements() const { return wgmma_panel_elements(head_dim); }
  constexpr int panels() const { return wgmma_panels(head_dim); }

  constexpr unsigned kv_tile_bytes() const { return unsigned(block_n) * unsigned(head_dim) * 2u; }
  constexpr unsigned q_tile_bytes() const { return unsigned(block_m) * unsigned(head_dim) * 2u; }
  // lse * log2(e) and D of a pair's query rows; two buffers per consumer group, which fills its own.
  constexpr unsigned stats_bytes() const { return unsigned(block_m) * 8u; }
  constexpr int stats_buffers() const { return 2 * consumer_groups(); }
  // The fused kernel's dQ: dS (block_m queries x block_n keys, 16-bit, the K-major A operand of dQ = dS K:
  // panels of 64 keys, one per consumer group), and two fp32 dQ tiles (dq_accum_layout.cuh's order), so a
  // pair's tile is stored while the bulk reduce-add of the previous one still reads the other.
  constexpr unsigned ds_tile_bytes() const { return unsigned(block_m) * unsigned(block_n) * 2u; }
  constexpr unsigned dq_tile_bytes() const { return unsigned(block_m) * unsigned(head_dim) * 4u; }
  constexpr unsigned dq_bytes() const { return accumulates_dq ? ds_tile_bytes() + 2u * dq_tile_bytes() : 0u; }

  // mbarriers: K and V full; Q (with dO and the statistics) full and empty per stage; each dQ tile full and
  // empty.
  constexpr unsigned barrier_bytes() const { return 8u * unsigned(1 + 2 * stages + (accumulates_dq ? 4 : 0)); }
  // 1024 bytes of slack to align the tiles to the 128-byte swizzle's 1024-byte pattern.
  constexpr unsigned smem_bytes() const {
    return 1024u + 2u * kv_tile_bytes() + unsigned(stages) * 2u * q_tile_bytes() + dq_bytes() +
           unsigned(stats_buffers()) * stats_bytes() + barrier_bytes();
  }

  // nullptr when the kernel can be instantiated with this shape, else which field is wrong and why.
  constexpr const char* invalid_reason() const {
    if (head_dim < 64 || head_dim > 128 || head_dim % 32 != 0)
      return "head_dim: must be 64, 96 or 128 (dK and dV of 64 keys live in registers)";
    if (warps != 12 && warps != 16) return "warps: must be 12 (two consumer warp groups) or 16 (three)";
    if (block_n != 64 * consumer_groups())
      return "block_n: must be 64 keys per consumer warp group (128 with 12 warps, 192 with 16)";
    if (block_m < 16 || block_m > 128 || block_m % 16 != 0)
      return "block_m: must be a multiple of 16 in [16, 128]";
    if (stages < 2 || stages > 4) return "stages: must be 2, 3 or 4";
    if (accumulates_dq && block_m % 64 != 0)
      return "block_m: the fused kernel's dQ products take 64 queries each (block_m 64 or 128)";
    if (accumulates_dq && warps != 12)
      return "warps: the fused kernel takes 12 (two consumer groups, taking dQ's products in turn)";
    // 24 registers for addresses, indices and the compiler's temporaries: ptxas for sm_90a fits d = 128 with
    // block_m = 64 and d = 64 with block_m = 96 without spills; d = 64 with block_m = 128 spills.
    if (accumulator_registers() + 24 > consumer_registers())
      return "block_m/head_dim: dK, dV, S^T and dP^T exceed a consumer warp group's registers";
    return nullptr;
  }
};

}  // namespace flashrtc

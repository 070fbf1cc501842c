#pragma once
// Roles, register budget and shared-memory plan of the Hopper backward kernel for head dim 256
// (attention_backward_wgmma_split.cuh), as constexpr arithmetic compiled by NVRTC (the kernel static_asserts
// invalid_reason() == nullptr) and by the host compiler (config checks, launch sizes).

#include "flashrtc/wgmma_panels.cuh"

namespace flashrtc {

struct WgmmaBackwardSplitShape {
  int head_dim, block_m, block_n, warps, stages;

  constexpr int threads() const { return warps * 32; }
  // Warp group 0 produces (TMA loads, dQ's bulk adds); groups 1 and 2 share the block's 64 keys.
  constexpr int consumer_groups() const { return 2; }
  // 128 * (40 + 2 * 232) of the SM's 65,536 registers, as the kernel for narrower heads.
  constexpr int consumer_registers() const { return 232; }
  constexpr int producer_registers() const { return 40; }
  // Each consumer group's slice of the pair's queries (S^T, dP^T) and of the head dim (dK, dV, dQ).
  constexpr int group_queries() const { return block_m / 2; }
  constexpr int group_columns() const { return head_dim / 2; }
  // dQ leaves in chunks of 64 columns (one K panel as wgmma's B operand).
  static constexpr int dq_chunk_columns() { return 64; }
  constexpr int dq_chunks() const { return group_columns() / dq_chunk_columns(); }
  // Per-thread accumulators at the peak: dK and dV (64 keys x the group's columns each) and dQ's chunks
  // (64 queries x the group's columns), issued together.
  constexpr int accumulator_registers() const { return 3 * group_columns() / 2; }

  constexpr int panel_bytes() const { return wgmma_panel_bytes(head_dim); }
  constexpr int panel_elements() const { return wgmma_panel_elements(head_dim); }
  constexpr int panels() const { return wgmma_panels(head_dim); }

  constexpr unsigned kv_tile_bytes() const { return unsigned(block_n) * unsigned(head_dim) * 2u; }
  constexpr unsigned q_tile_bytes() const { return unsigned(block_m) * unsigned(head_dim) * 2u; }
  // P^T and dS^T (keys x queries) and dS (queries x keys), 16-bit: the A operands of dV, dK and dQ.
  constexpr unsigned operand_tile_bytes() const { return unsigned(block_m) * unsigned(block_n) * 2u; }
  // One fp32 dQ chunk per consumer group, in dq_accum_layout.cuh's order.
  constexpr unsigned dq_chunk_bytes() const { return unsigned(block_m) * unsigned(dq_chunk_columns()) * 4u; }
  // lse * log2(e) and D of a group's queries; two buffers per group, which fills its own.
  constexpr unsigned stats_bytes() const { return unsigned(group_queries()) * 8u; }
  constexpr int stats_buffers() const { return 2 * consumer_groups(); }
  // mbarriers: K and V full; Q full and empty per stage; dO full and empty (one buffer); each group's dQ
  // chunk full and empty.
  constexpr unsigned barrier_bytes() const { return 8u * unsigned(1 + 2 * stages + 2 + 4); }
  // Q in `stages` buffers, dO in one: a second dO buffer does not fit beside K, V and dQ's chunks.
  constexpr unsigned smem_bytes() const {
    return 1024u + 2u * kv_tile_bytes() + unsigned(stages + 1) * q_tile_bytes() + 3u * operand_tile_bytes() +
           2u * dq_chunk_bytes() + unsigned(stats_buffers()) * stats_bytes() + barrier_bytes();
  }

  // nullptr when the kernel can be instantiated with this shape, else which field is wrong and why.
  constexpr const char* invalid_reason() const {
    if (head_dim != 256)
      return "head_dim: must be 256 (the kernel splits the head dim into two groups' 128 columns)";
    if (warps != 12) return "warps: must be 12 (a producer and two consumer warp groups)";
    if (block_n != 64) return "block_n: must be 64 (wgmma's M: the keys both consumer groups share)";
    if (block_m != 64)
      return "block_m: must be 64 (two groups of 32 queries for S^T and dP^T; 64 queries for dQ's product)";
    if (stages < 1 || stages > 2) return "stages: must be 1 or 2 (Q buffers)";
    if (accumulator_registers() + 40 > consumer_registers())
      return "head_dim: dK, dV and dQ exceed a consumer warp group's registers";
    return nullptr;
  }
};

}  // namespace flashrtc

#pragma once
// Roles, register budget and shared-memory plan of the Hopper forward kernel (attention_forward_wgmma.cuh),
// as constexpr arithmetic compiled by NVRTC (the kernel static_asserts invalid_reason() == nullptr) and by
// the host compiler (config checks, launch sizes).

#include "flashrtc/wgmma_panels.cuh"

namespace flashrtc {

// How the blocks of a persistent grid (the kernel's kPersistent, which the host chooses per mask and key
// length) share out the work tiles, for a mask (kernel::Mask's value; tile_scheduler.cuh). Without a mask
// every tile costs the same and blocks stride over them. Under a causal mask the tiles differ in length, and
// a block that finishes early claims the next one from a counter, longest first, as the hardware hands out
// a grid of one block per tile (a static stride measured 5-26% slower than that at 8k-16k keys on an H200).
constexpr bool wgmma_forward_claims_tiles(int mask) { return mask != 0; }

struct WgmmaForwardShape {
  int head_dim, block_m, block_n, warps, stages;
  bool persistent = false;  // the kernel's kPersistent

  // Shared memory a block may use on sm_90 (227 KiB).
  static constexpr unsigned kSmemLimitBytes = 232448;

  constexpr int threads() const { return warps * 32; }
  // Warp group 0 produces (TMA loads); each other group consumes 64 query rows (wgmma's M).
  constexpr int consumer_groups() const { return warps / 4 - 1; }
  // setmaxnreg budgets per thread: the producer gives its registers to the consumers, within what the launch
  // allocated (65,536 / threads, in steps of 8). 128 threads per group: 2 consumers 128 * (24 + 240 + 240) =
  // 64,512 = 384 * 168 registers; 3: 32 + 3 * 160 = 4 * 128; 4: 24 + 4 * 112 = 472 <= 5 * 96.
  constexpr int consumer_registers() const {
    return consumer_groups() == 2 ? 240 : consumer_groups() == 3 ? 160 : 112;
  }
  constexpr int producer_registers() const { return consumer_groups() == 3 ? 32 : 24; }
  // Per-thread fp32 accumulators of a consumer: O (64 x head_dim), S (64 x block_n), and P, S packed to
  // 16 bits, kept for the next step's P V while the following S is computed.
  constexpr int accumulator_registers() const { return head_dim / 2 + block_n / 2 + block_n / 4; }

  // Rows are cut into swizzle panels (wgmma_panels.cuh).
  constexpr int panel_bytes() const { return wgmma_panel_bytes(head_dim); }
  constexpr int panel_elements() const { return wgmma_panel_elements(head_dim); }
  constexpr int panels() const { return wgmma_panels(head_dim); }

  constexpr unsigned q_group_bytes() const { return 64u * unsigned(head_dim) * 2u; }
  constexpr unsigned kv_tile_bytes() const { return unsigned(block_n) * unsigned(head_dim) * 2u; }
  // mbarriers: Q full and Q empty per consumer group and Q slot; K full, V full, K empty, V empty per stage;
  // "O stored" (where O leaves through the K and V buffers).
  constexpr unsigned barrier_bytes(int slots) const {
    return 8u * unsigned(2 * consumer_groups() * slots + 4 * stages + 1);
  }
  constexpr unsigned barrier_bytes() const { return barrier_bytes(q_slots()); }
  // The tile scheduler's two slots and their four mbarriers (TileScheduler::kBytes in tile_scheduler.cuh,
  // which the kernel checks against this), after the barriers.
  static constexpr unsigned kSchedulerBytes = 40;
  // 1024 bytes of slack to align the tiles to the 128-byte swizzle's 1024-byte pattern.
  constexpr unsigned smem_bytes(int slots) const {
    return 1024u + unsigned(consumer_groups() * slots) * q_group_bytes() + 2u * unsigned(stages) * kv_tile_bytes() +
           barrier_bytes(slots) + kSchedulerBytes;
  }
  // Whether the blocks of a persistent grid without a mask may split the partial last round's tiles into
  // their key tiles (TileSchedule::kStrideSplit; the host decides per call): the three-group kernels of long
  // calls. On an H200 the split's code alone cost the two-group 128x128 kernel 1-2% at d = 128 and 512-1k
  // keys, and the four-group 256x64 0.8% at d = 64 and 512 keys, where their calls gain little from it
  // (docs/measurements/forward-hopper/stream_k.md).
  constexpr bool splits_last_round(int mask) const {
    return persistent && mask == 0 && consumer_groups() == 3;
  }
  // The split tiles' work buffer for a grid of `blocks` (split_tile_partials.cuh): a 32-bit flag per block
  // and consumer group, zeroed before the launch; from split_slots_offset a slot per block and group of
  // (head_dim / 8 + 1) x 128 float4 (a consumer thread's O, row maxima and partial sums).
  constexpr unsigned long long split_flag_bytes(unsigned blocks) const {
    return 4ull * blocks * unsigned(consumer_groups());
  }
  constexpr unsigned long long split_slots_offset(unsigned blocks) const {
    return (split_flag_bytes(blocks) + 127) / 128 * 128;
  }
  constexpr int split_slot_chunks() const { return head_dim / 8 + 1; }
  constexpr unsigned long long split_work_bytes(unsigned blocks) const {
    return split_slots_offset(blocks) +
           16ull * 128 * unsigned(split_slot_chunks()) * blocks * unsigned(consumer_groups());
  }

  // Q tiles per consumer group: on a persistent grid two where they fit, so the next tile's Q loads while
  // this one's O (written over its Q) is stored; else one.
  constexpr int q_slots() const { return persistent && smem_bytes(2) <= kSmemLimitBytes ? 2 : 1; }
  constexpr unsigned smem_bytes() const { return smem_bytes(q_slots()); }

  // nullptr when the kernel can be instantiated with this shape, else which field is wrong and why.
  constexpr const char* invalid_reason() const {
    if (head_dim < 64 || head_dim > 256 || head_dim % 32 != 0)
      return "head_dim: must be a multiple of 32 in [64, 256]";
    if (warps != 12 && warps != 16 && warps != 20)
      return "warps: must be 12 (two consumer warp groups), 16 (three) or 20 (four)";
    if (block_m != 64 * consumer_groups())
      return "block_m: must be 64 query rows per consumer warp group (128 with 12 warps, 192 with 16, 256 with 20)";
    if (block_n < 16 || block_n > 256 || block_n % 16 != 0) return "block_n: must be a multiple of 16 in [16, 256]";
    if (stages < 2 || stages > 4) return "stages: must be 2, 3 or 4";
    // 32 registers for addresses, indices, softmax state and the compiler's temporaries: FlashAttention-3's
    // 192x128 tile at d = 64 (128 accumulators in 160) fits without a mask; a tile that spills under some mask
    // stays valid for the tuner but out of the defaults (tests/cpu/test_runtime_compile.cpp checks them).
    if (accumulator_registers() + 32 > consumer_registers())
      return "block_n/head_dim: O, S and P exceed a consumer warp group's registers";
    return nullptr;
  }
};

}  // namespace flashrtc

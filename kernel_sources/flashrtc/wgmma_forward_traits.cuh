#pragma once
// The Hopper forward kernel's compile-time choices for one specialization (attention_forward_wgmma.cuh), and
// its shared-memory map: the Q, K and V tiles and the mbarriers that hand them between producer and
// consumers.
#include "flashrtc/forward_block.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/tile_scheduler.cuh"
#include "flashrtc/varlen_sequence.cuh"
#include "flashrtc/wgmma.cuh"
#include "flashrtc/wgmma_forward_shape.cuh"

namespace flashrtc {

template <typename T_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_,
          kernel::Mask kMask_, bool kPersistent_, bool kVarlen_ = false>
struct WgmmaForwardTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr kernel::Mask kMask = kMask_;
  static constexpr bool kPersistent = kPersistent_;
  // The variable-length forward (docs/varlen.md): one block per (sequence, head, query block), each moved
  // onto its sequence (VarlenForwardBlock). Not on a persistent grid: a schedule of the ragged tiles, longest
  // first, is a later step.
  static constexpr bool kVarlen = kVarlen_;
  static_assert(!kVarlen || !kPersistent, "the variable-length kernel takes one block per work tile");
  using Params = typename kernel::ForwardParamsOf<kVarlen>::type;
  static_assert(sizeof(T) == 2, "the Hopper kernel takes 16-bit inputs");
  static constexpr WgmmaForwardShape kShape{kHeadDim, kBlockM, kBlockN, kWarps_, kStages, kPersistent};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the Hopper forward kernel");

  static constexpr int kConsumers = kShape.consumer_groups();
  static constexpr unsigned kConsumerWarps = 4u * kConsumers;
  static constexpr int kPanelBytes = kShape.panel_bytes();
  static constexpr int kPanelElements = kShape.panel_elements();
  static constexpr int kPanels = kShape.panels();
  using Panel = SwizzledPanel<kPanelBytes>;
  static constexpr unsigned kQGroupBytes = kShape.q_group_bytes();
  static constexpr int kQSlots = kShape.q_slots();
  static constexpr int kQBarriers = kQSlots * kConsumers;  // Q full, and Q empty: one per slot and group
  static constexpr unsigned kKVBytes = kShape.kv_tile_bytes();
  static constexpr int kOTiles = kHeadDim / 8;  // 8-column tiles of O
  static constexpr int kQKSteps = kHeadDim / 16;
  static constexpr int kPVSteps = kBlockN / 16;
  using Block = typename ForwardBlockOf<kVarlen, T, kBlockM, kBlockN, kMask>::type;
  // TMA coordinates: a packed call's maps are one batch of its sequences one after another, so a block's rows
  // start at its sequence's first row; a dense call's, at row 0 of its batch.
  __device__ __forceinline__ static int first_q_row(const Block& block) {
    if constexpr (kVarlen)
      return block.seq.first_q;
    else
      return 0;
  }
  __device__ __forceinline__ static int first_key_row(const Block& block) {
    if constexpr (kVarlen)
      return block.seq.first_k;
    else
      return 0;
  }
  __device__ __forceinline__ static int map_batch(const Block& block) {
    if constexpr (kVarlen)
      return 0;
    else
      return block.batch;
  }

  static constexpr TileSchedule kSchedule =
      !kPersistent                                          ? TileSchedule::kOneTile
      : wgmma_forward_claims_tiles(static_cast<int>(kMask)) ? TileSchedule::kDynamic
      : kShape.splits_last_round(static_cast<int>(kMask))   ? TileSchedule::kStrideSplit
                                                            : TileSchedule::kStride;
  static constexpr bool kSplits = kSchedule == TileSchedule::kStrideSplit;
  using Tiles = TileScheduler<kSchedule, 128 * kConsumers>;
  static_assert(Tiles::kBytes == WgmmaForwardShape::kSchedulerBytes, "the tile scheduler's shared memory");

  // With one Q slot per group on a persistent grid (d >= 160 on two consumer groups, where two do not fit),
  // O leaves through the buffers of the tile's last K and V (group 0's in K, group 1's in V) instead of the Q
  // slot: each group hands its Q slot back once its last Q K^T has completed, so the next tile's Q loads
  // under this tile's last products and epilogue, and the stores are waited for only under the next tile's
  // first product (before it, for a group that skips key tiles: the producer may wait for this arrival before
  // it loads them). The "O stored" barrier completes one phase per such tile and holds the producer's next
  // load into the stage of the tile's last one, two loads later: that load is what any later arrival waits
  // for, so the barrier cannot run a phase ahead of the producer. A tile without keys stores from its Q slot.
  // On an H200, bf16 and fp16 at d = 256 without a mask: +2-2.6% at 512 and 1k keys, +0.9% at 2k
  // (docs/measurements/forward-hopper/o_in_kv.md). A group's O (64 rows) must fit in one K or V buffer:
  // block_n >= 64.
  static constexpr bool kOInKV =
      kPersistent && kQSlots == 1 && kConsumers == 2 && kStages == 2 && kBlockN >= 64;
  // With two Q slots the previous tile's O store is waited for under this tile's first products.
  static constexpr bool kDeferredHandBack = Tiles::kLoops && kQSlots > 1;

  // Ping-pong (the consumers' turns): two groups of up to 128 columns.
  static constexpr bool kPingPong = kConsumers == 2 && kHeadDim <= 128;
  // Where the softmax's exponentials run under the group's own P V: the kernels whose groups take no
  // ping-pong turns and are at most three (d = 64 and 96 on 192-row tiles, d = 128 on 192x80, d > 128). ptxas
  // schedules a wgmma.wait_group at the top of its basic block, which puts the wait for P V ahead of every
  // exponential unless the wait has a block of its own after the softmax (the rescale branch,
  // WgmmaForwardConsumer). On an H200, bf16, with the flags it enables: d = 64 unmasked +4-6% from 2k keys, d
  // = 256 unmasked +3-4%, d = 256 causal +1-2% at 2k-8k keys; the ping-pong kernels lose 1-2% and d = 64 on
  // four groups (256x64) 2-4% at 512-1k causal keys, so they keep the wait ahead
  // (docs/measurements/forward-hopper/softmax_under_pv.md).
  static constexpr bool kSoftmaxUnderPV = !kPingPong && kConsumers <= 3;

  // Under a causal mask the producer loads K a key tile ahead of V (a consumer reads K(i) a step before V(i),
  // so K(i + 1) need not queue behind V(i)'s empty buffer), and on two consumer groups a step's Q K^T goes
  // out before the wait for the previous V. On an H200, bf16, causal 512-2k keys: +0.5 to +1.5% at d = 96-256
  // (d = 160 -1% at 512), +2.8 to +3.2% at d = 224, +1.3% at d = 64 512
  // (docs/measurements/forward-hopper/k_ahead.md). Not without a mask: d = 256 there loses 1-2% from 2k keys, d = 128
  // (128x128) 1% at 2k. Three and four groups wait for both before their products: their Q K^T ahead of the V
  // wait loses 4-10% (192x128 at d = 64, 2k keys and more).
  static constexpr bool kKAhead = kMask != kernel::Mask::kNone;
  static constexpr bool kWaitVUnderQK = kKAhead && kConsumers == 2;

  // The warp group, read through a shuffle where ptxas should know it is warp-uniform: what derives from it
  // (under a causal mask on the persistent grid, the ring position of groups that skip key tiles) then stays
  // in uniform registers with the wgmma descriptors, which it otherwise rebuilds in vector registers for each
  // product (12% fewer instructions at d = 64 causal 1k keys; on an H200, bf16, causal +9-11% at d = 64
  // 512-2k keys, +5-6% at d = 128 and 256; d = 64 unmasked +3% at 512-1k). Not elsewhere: d = 256 loses 2-5%
  // there (unmasked, and causal from 4k keys) unless its exponentials run under P V (kSoftmaxUnderPV), where
  // it gains 3-4% unmasked with stepped descriptors (docs/measurements/forward-hopper/uniform_group.md).
  static constexpr bool kUniformGroup =
      kHeadDim == 64 || kSoftmaxUnderPV || (kMask != kernel::Mask::kNone && (kPersistent || kHeadDim <= 128));
  // A product's descriptors stepped by one add from the tile's own, or built anew for each. Stepping runs
  // faster on an H200 at d = 64 (+2-4%) and under a causal mask (d = 256 +5-10% at 512-2k keys, d = 128
  // under 1%), and at d = 256 without a mask where the exponentials run under P V; without them d = 256
  // unmasked loses 1-1.4% at 512-1k keys (docs/measurements/forward-hopper/uniform_group.md).
  static constexpr bool kStepDescriptors = kHeadDim <= 128 || kMask != kernel::Mask::kNone || kSoftmaxUnderPV;

  // The lane's two rows go through the softmax together, each in two chains (online_softmax.cuh), except at
  // d = 64 without a mask on four groups, where the exponentials bound the kernel: one row after the other
  // keeps the MUFU busy under the next row's max. On an H200 together runs 1-5% faster at d = 96 and 128 and
  // at d = 64 causal, within 1.5% either way at d = 256, and 3-4% slower at d = 64 without a mask unless the
  // exponentials run under P V (kSoftmaxUnderPV: together +4-6% on 192x128 tiles)
  // (docs/measurements/forward-hopper/softmax_rows.md).
  static constexpr int kSoftmaxRows =
      kHeadDim == 64 && kMask == kernel::Mask::kNone && !kSoftmaxUnderPV ? 1 : 2;  // and chains per row
  // The narrower softmax of a causal tile's first key tile (columns: whole 8-column tiles of S). Not on wider
  // key tiles: 128x160 at d = 128 spills 16 bytes with it under the bottom-right mask (persistent grid).
  static constexpr int kNarrowN = (kBlockN / 2 + 7) / 8 * 8;
  static constexpr bool kNarrowFirst = kMask != kernel::Mask::kNone && kBlockN >= 96 && kBlockN <= 128;
};

// The block's shared memory: Q (and later O) [slot][group][panel][64 rows], K and V [stage][panel][block_n
// rows], then the barriers and the tile scheduler's slots. Q tile `local` of a block goes to slot
// local % kQSlots, its barriers' phase is (local / kQSlots) & 1.
template <class Traits>
struct WgmmaForwardSmem {
  unsigned q_smem, k_smem, v_smem, barriers;

  __device__ __forceinline__ explicit WgmmaForwardSmem(const unsigned char* smem_raw)
      : q_smem((shared_address(smem_raw) + 1023u) & ~1023u),
        k_smem(q_smem + Traits::kQSlots * Traits::kConsumers * Traits::kQGroupBytes),
        v_smem(k_smem + Traits::kStages * Traits::kKVBytes),
        barriers(v_smem + Traits::kStages * Traits::kKVBytes) {}

  __device__ __forceinline__ unsigned q_full(int group, int slot) const {
    return barriers + 8u * (slot * Traits::kConsumers + group);
  }
  __device__ __forceinline__ unsigned q_empty(int group, int slot) const {
    return barriers + 8u * (Traits::kQBarriers + slot * Traits::kConsumers + group);
  }
  __device__ __forceinline__ unsigned k_full(int stage) const {
    return barriers + 8u * (2 * Traits::kQBarriers + stage);
  }
  __device__ __forceinline__ unsigned v_full(int stage) const {
    return barriers + 8u * (2 * Traits::kQBarriers + Traits::kStages + stage);
  }
  __device__ __forceinline__ unsigned k_empty(int stage) const {
    return barriers + 8u * (2 * Traits::kQBarriers + 2 * Traits::kStages + stage);
  }
  __device__ __forceinline__ unsigned v_empty(int stage) const {
    return barriers + 8u * (2 * Traits::kQBarriers + 3 * Traits::kStages + stage);
  }
  // Traits::kOInKV: the consumers' O stores out of the K and V buffers have read them.
  __device__ __forceinline__ unsigned o_stored() const {
    return barriers + 8u * (2 * Traits::kQBarriers + 4 * Traits::kStages);
  }
  // The tile scheduler's slots and barriers.
  __device__ __forceinline__ unsigned scheduler() const { return barriers + Traits::kShape.barrier_bytes(); }

  // By one thread, before the block synchronizes and any other use (the tile scheduler's barriers apart).
  __device__ __forceinline__ void init_barriers() const {
    for (int slot = 0; slot < Traits::kQSlots; ++slot)
      for (int g = 0; g < Traits::kConsumers; ++g) {
        mbarrier_init(q_full(g, slot), 1);
        mbarrier_init(q_empty(g, slot), Traits::kOInKV ? 4 : 1);
      }
    for (int s = 0; s < Traits::kStages; ++s) {
      mbarrier_init(k_full(s), 1);
      mbarrier_init(v_full(s), 1);
      mbarrier_init(k_empty(s), Traits::kConsumerWarps);
      mbarrier_init(v_empty(s), Traits::kConsumerWarps);
    }
    if constexpr (Traits::kOInKV) mbarrier_init(o_stored(), Traits::kConsumers);
  }
};

}  // namespace flashrtc

#pragma once
// Forward attention for Hopper (sm_90a), fp16 / bf16 with fp32 accumulation: TMA loads, wgmma products and
// warp specialization (FlashAttention-3's structure).
//
// A work tile is block_m query rows of one (batch, head). kPersistent, chosen by the host per mask and key
// length, puts one block per SM: without a mask the blocks stride over the tiles, under a causal mask they
// claim them from a counter, longest first (tile_scheduler.cuh, wgmma_forward_claims_tiles); otherwise each
// block takes one tile; an unmasked grid's partial last round is cut into key tiles shared out evenly
// (TileSchedule::kStrideSplit), the pieces of a tile merged by the block that holds its last key tiles
// (split_tile_partials.cuh). Warp group 0 is the producer: one thread claims the tiles and issues every TMA
// copy (per tile Q, then K and V tiles of block_n keys into a ring of `stages` buffers that runs on across
// tiles, so the next tile's keys load under this one's epilogue), the other threads give their registers away
// and leave. Each other warp group consumes 64 query rows:
//   S = Q K^T     wgmma, both operands from shared memory;
//   softmax       running max and sum per row in registers, exp2 with the scale folded in;
//   O += P V      wgmma with P from registers (S's accumulators packed to 16 bits are its A fragments) and
//                 V, row-major in shared memory, read transposed.
// Within a group the products overlap the softmax: while the softmax of tile j runs, the tensor cores
// compute P(j-1) V(j-1), issued with S(j) = Q K(j)^T. Between the two consumer groups of a d <= 128 tile
// the products "ping-pong": a token passed through named barriers lets one group issue its products while
// the other runs its softmax, so the tensor cores see one group's work at a time. Key tiles are visited from
// the last to the first, so the ones that need a mask (the causal diagonal, the end of the keys) come first.
// Buffers are handed over by mbarriers: "full" ones the TMA completes, "empty" ones each consumer warp
// arrives on once its products have read the buffer. O leaves through shared memory (the group's Q tile, or
// with one Q slot on a persistent grid the last K or V buffer: kOInKV) and a TMA store, which clips rows past
// the end; lse is written from registers. The group's "Q empty"
// barrier tells the producer when the store has read the tile, so the next Q may overwrite it.
#include "flashrtc/element_types.cuh"
#include "flashrtc/forward_block.cuh"
#include "flashrtc/forward_epilogue.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/mma.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/opaque.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/split_tile_partials.cuh"
#include "flashrtc/tile_scheduler.cuh"
#include "flashrtc/wgmma.cuh"
#include "flashrtc/wgmma_forward_shape.cuh"

namespace flashrtc {

// A column count as a type, for the kernel's lambdas that compute the first N columns of S.
template <int N>
struct Columns {
  static constexpr int value = N;
};

// The maps are rank 4 over [batch, seq, head, dim] tensors, innermost first: (dim, seq, head, batch). A box
// is one panel of rows: (panel elements, rows, 1, 1), rows = 64 for Q and O, block_n for K and V.
// work: the launch's work buffer: a zeroed counter where the kernel claims tiles (kPersistent under a causal
// mask), the split tiles' flags and slots where p.whole_tiles < p.num_blocks (kStrideSplit), else unused.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kPersistent>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_forward_wgmma(const __grid_constant__ kernel::ForwardParams p,
                            const __grid_constant__ TmaDescriptor q_map,
                            const __grid_constant__ TmaDescriptor k_map,
                            const __grid_constant__ TmaDescriptor v_map,
                            const __grid_constant__ TmaDescriptor o_map, unsigned* work) {
  static_assert(sizeof(T) == 2, "the Hopper kernel takes 16-bit inputs");
  constexpr WgmmaForwardShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages, kPersistent};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the Hopper forward kernel");
  constexpr int kConsumers = kShape.consumer_groups();
  constexpr int kPanelBytes = kShape.panel_bytes();
  constexpr int kPanelElements = kShape.panel_elements();
  constexpr int kPanels = kShape.panels();
  constexpr unsigned kQGroupBytes = kShape.q_group_bytes();
  constexpr int kQSlots = kShape.q_slots();
  constexpr unsigned kKVBytes = kShape.kv_tile_bytes();
  // The narrower softmax of a causal tile's first key tile (columns: whole 8-column tiles of S). Not on
  // wider key tiles: 128x160 at d = 128 then spilled 16 bytes under the bottom-right mask (persistent grid).
  constexpr int kNarrowN = (kBlockN / 2 + 7) / 8 * 8;
  constexpr bool kNarrowFirst = kMask != kernel::Mask::kNone && kBlockN >= 96 && kBlockN <= 128;
  constexpr int kOTiles = kHeadDim / 8;   // 8-column tiles of O
  constexpr int kQKSteps = kHeadDim / 16;
  constexpr int kPVSteps = kBlockN / 16;
  using Panel = SwizzledPanel<kPanelBytes>;

  extern __shared__ unsigned char smem_raw[];
  // Tiles: Q (and later O) [group][panel][64 rows], K and V [stage][panel][block_n rows], then the barriers.
  const unsigned q_smem = (shared_address(smem_raw) + 1023u) & ~1023u;
  const unsigned k_smem = q_smem + kQSlots * kConsumers * kQGroupBytes;
  const unsigned v_smem = k_smem + kStages * kKVBytes;
  const unsigned barriers = v_smem + kStages * kKVBytes;
  constexpr TileSchedule kSchedule =
      !kPersistent                                          ? TileSchedule::kOneTile
      : wgmma_forward_claims_tiles(static_cast<int>(kMask)) ? TileSchedule::kDynamic
      : kShape.splits_last_round(static_cast<int>(kMask))   ? TileSchedule::kStrideSplit
                                                            : TileSchedule::kStride;
  constexpr bool kSplits = kSchedule == TileSchedule::kStrideSplit;
  using Tiles = TileScheduler<kSchedule, 128 * kConsumers>;
  static_assert(Tiles::kBytes == WgmmaForwardShape::kSchedulerBytes, "the tile scheduler's shared memory");
  const Tiles tiles{p.num_blocks,
                    work,
                    barriers + kShape.barrier_bytes(),
                    p.whole_tiles,
                    p.split_key_tiles,
                    p.split_run,
                    p.split_longer_runs};
  // Q tile `local` of a block goes to slot local % kQSlots, its barriers' phase is (local / kQSlots) & 1.
  constexpr int kQBarriers = kQSlots * kConsumers;
  // With one Q slot per group on a persistent grid (d >= 160 on two consumer groups, where two do not fit),
  // O leaves through the buffers of the tile's last K and V (group 0's in K, group 1's in V) instead
  // of the Q slot: each group hands its Q slot back once its last Q K^T has completed, so the next tile's Q
  // loads under this tile's last products and epilogue, and the stores are waited for only under the next
  // tile's first product (before it, for a group that skips key tiles: the producer may wait for this
  // arrival before it loads them). The "O stored" barrier completes one phase per such tile and holds the
  // producer's next load into the stage of the tile's last one, two loads later: that load is what any later
  // arrival waits for, so the barrier cannot run a phase ahead of the producer. A tile without keys stores
  // from its Q slot. On an H200, bf16 and fp16 at d = 256 without a mask: +2-2.6% at 512 and 1k keys, +0.9%
  // at 2k. A group's O (64 rows) must fit in one K or V buffer: block_n >= 64.
  constexpr bool kOInKV = kPersistent && kQSlots == 1 && kConsumers == 2 && kStages == 2 && kBlockN >= 64;
  const auto q_full = [&](int group, int slot) { return barriers + 8u * (slot * kConsumers + group); };
  const auto q_empty = [&](int group, int slot) { return barriers + 8u * (kQBarriers + slot * kConsumers + group); };
  const auto k_full = [&](int stage) { return barriers + 8u * (2 * kQBarriers + stage); };
  const auto v_full = [&](int stage) { return barriers + 8u * (2 * kQBarriers + kStages + stage); };
  const auto k_empty = [&](int stage) { return barriers + 8u * (2 * kQBarriers + 2 * kStages + stage); };
  const auto v_empty = [&](int stage) { return barriers + 8u * (2 * kQBarriers + 3 * kStages + stage); };
  const unsigned o_stored = barriers + 8u * (2 * kQBarriers + 4 * kStages);
  constexpr unsigned kConsumerWarps = 4u * kConsumers;
  // Ping-pong (the consumers' turns, below): two groups of up to 128 columns.
  constexpr bool kPingPong = kConsumers == 2 && kHeadDim <= 128;
  // Where the softmax's exponentials run under the group's own P V: the kernels whose groups take no
  // ping-pong turns and are at most three (d = 64 and 96 on 192-row tiles, d = 128 on 192x80, d > 128). ptxas
  // schedules a wgmma.wait_group at the top of its basic block, which put the wait for P V ahead of every
  // exponential; in a block of its own after the softmax it stays there (the rescale branch, below). On an
  // H200, bf16, with the flags below that it enables: d = 64 unmasked +4-6% from 2k keys, d = 256 unmasked
  // +3-4%, d = 256 causal +1-2% at 2k-8k keys; the ping-pong kernels (d <= 128, two groups) lost 1-2% and
  // d = 64 on four groups (256x64) 2-4% at 512-1k causal keys, so they keep the wait ahead
  // (docs/measurements/forward-hopper/softmax_under_pv.md).
  constexpr bool kSoftmaxUnderPV = !kPingPong && kConsumers <= 3;

  // Under a causal mask the producer loads K a key tile ahead of V (a consumer reads K(i) a step before V(i),
  // so K(i + 1) need not queue behind V(i)'s empty buffer), and on two consumer groups a step's Q K^T goes out
  // before the wait for the previous V. On an H200, bf16, causal 512-2k keys: +0.5 to +1.5% at d = 96-256
  // (d = 160 -1% at 512), +2.8 to +3.2% at d = 224, +1.3% at d = 64 512 (docs/measurements/forward-hopper/k_ahead.md).
  // Not without a mask: d = 256 there lost 1-2% from 2k keys, d = 128 (128x128) 1% at 2k. Three and four
  // groups wait for both before their products: their Q K^T ahead of the V wait lost 4-10% (192x128 at d = 64,
  // 2k keys and more).
  constexpr bool kKAhead = kMask != kernel::Mask::kNone;
  constexpr bool kWaitVUnderQK = kKAhead && kConsumers == 2;
  const int tid = threadIdx.x;
  // The warp group, read through a shuffle where ptxas should know it is warp-uniform: what derives from it
  // (under a causal mask on the persistent grid, the ring position of groups that skip key tiles) then stays
  // in uniform registers with the wgmma descriptors, which it otherwise rebuilt in vector registers for each
  // product (12% fewer instructions at d = 64 causal 1k keys; on an H200, bf16, causal +9-11% at d = 64
  // 512-2k keys, +5-6% at d = 128 and 256; d = 64 unmasked +3% at 512-1k). Not elsewhere: d = 256 lost 2-5%
  // (unmasked, and causal from 4k keys) (docs/measurements/forward-hopper/uniform_group.md), until its exponentials
  // ran under P V (kSoftmaxUnderPV): then +3-4% unmasked with the stepped descriptors below.
  constexpr bool kUniformGroup =
      kHeadDim == 64 || kSoftmaxUnderPV || (kMask != kernel::Mask::kNone && (kPersistent || kHeadDim <= 128));
  const int group = kUniformGroup ? __shfl_sync(0xffffffffu, tid / 128, 0) : tid / 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  using Block = ForwardBlock<T, kBlockM, kBlockN, kMask>;

  if (tid == 0) {
    for (int slot = 0; slot < kQSlots; ++slot)
      for (int g = 0; g < kConsumers; ++g) {
        mbarrier_init(q_full(g, slot), 1);
        mbarrier_init(q_empty(g, slot), kOInKV ? 4 : 1);
      }
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(k_full(s), 1);
      mbarrier_init(v_full(s), 1);
      mbarrier_init(k_empty(s), kConsumerWarps);
      mbarrier_init(v_empty(s), kConsumerWarps);
    }
    if constexpr (kOInKV) mbarrier_init(o_stored, kConsumers);
    tiles.init();
    fence_barrier_init();
  }
  __syncthreads();

  if (group == 0) {
    registers_decrease_to<kShape.producer_registers()>();
    if (warp == 0 && elect_one_lane()) {
      tma_prefetch_descriptor(q_map);
      tma_prefetch_descriptor(k_map);
      tma_prefetch_descriptor(v_map);
      int kv_loads = 0;  // K and V tiles issued so far: the ring's position
      // kOInKV: per stage (two bits each), 2 + the parity of the "O stored" phase its next load waits for, or
      // 0; and the tiles whose O went through K and V so far. Two words: the producer has 24 registers.
      unsigned o_waits = 0, o_tiles = 0;
      tiles.produce([&](const WorkTile& w) {
        const int local = w.local;
        const Block block(p, w.tile, true);
        const auto load_q = [&]() {
          const int slot = local % kQSlots;
          for (int g = 0; g < kConsumers; ++g) {
            mbarrier_wait(q_empty(g, slot), ((local / kQSlots) & 1) ^ 1);
            // The full box's bytes even where it hangs past the end: TMA counts the zeros it fills in.
            mbarrier_arrive_expect_tx(q_full(g, slot), kQGroupBytes);
#pragma unroll 1
            for (int panel = 0; panel < kPanels; ++panel)
              tma_load_4d(q_smem + (slot * kConsumers + g) * kQGroupBytes + panel * 64u * kPanelBytes, q_map,
                          q_full(g, slot), panel * kPanelElements, static_cast<int>(block.m0) + 64 * g, block.head,
                          block.batch);
          }
        };
        // The K (load_k) or V (load_v) tile at key n0 into ring position `pos`, once the stage's previous
        // tile has been read.
        const auto load_kv = [&](const TmaDescriptor& map, unsigned tiles_smem, unsigned full, unsigned empty,
                                 int pos, int n0) {
          mbarrier_wait(empty, ((pos / kStages) & 1) ^ 1);
          mbarrier_arrive_expect_tx(full, kKVBytes);
#pragma unroll 1
          for (int panel = 0; panel < kPanels; ++panel)
            tma_load_4d(tiles_smem + (pos % kStages) * kKVBytes + panel * unsigned(kBlockN) * kPanelBytes,
                        map, full, panel * kPanelElements, n0, block.kv_head, block.batch);
        };
        const auto load_k = [&](int pos, int n0) {
          const int stage = pos % kStages;
          // The first load into the stage where an earlier tile's O was left waits for its store (K comes
          // before V at every position).
          if constexpr (kOInKV) {
            const unsigned wait = (o_waits >> (2 * stage)) & 3u;
            if (wait != 0) {
              mbarrier_wait(o_stored, wait & 1u);
              o_waits &= ~(3u << (2 * stage));
            }
          }
          load_kv(k_map, k_smem, k_full(stage), k_empty(stage), pos, n0);
        };
        const auto load_v = [&](int pos, int n0) {
          load_kv(v_map, v_smem, v_full(pos % kStages), v_empty(pos % kStages), pos, n0);
        };
        // The unit's key tiles in visiting order: all of them, or a split tile's piece. Q goes after the first
        // K tile (Q waits for the previous tile's epilogue, which K need not); under kKAhead K(i + 1) goes
        // before V(i), else K(i) and V(i) go together.
        const int first = kSplits ? w.key_begin : 0;
        const int end = kSplits ? min(w.key_end, block.num_n_blocks) : block.num_n_blocks;
        const auto key_n0 = [&](int i) { return (block.num_n_blocks - 1 - i) * kBlockN; };
        if constexpr (kKAhead) {
          const int base = kv_loads - first;  // key tile i goes to ring position base + i
          if (first < end) load_k(base + first, key_n0(first));
          load_q();
          for (int i = first; i < end; ++i) {
            if (i + 1 < end) load_k(base + i + 1, key_n0(i + 1));
            load_v(base + i, key_n0(i));
          }
          kv_loads += end - first;
        } else {
          if (first == end) load_q();
          for (int i = first; i < end; ++i) {
            load_k(kv_loads, key_n0(i));
            if (i == first) load_q();
            load_v(kv_loads, key_n0(i));
            ++kv_loads;
          }
        }
        if constexpr (kOInKV)
          if (first < end) {
            o_waits |= (2u | (o_tiles & 1u)) << (2 * ((kv_loads - 1) % kStages));
            ++o_tiles;
          }
      });
    }
    return;
  }

  registers_increase_to<kShape.consumer_registers()>();
  const int consumer = group - 1;
  const int warp_in_group = warp % 4;
  unsigned q_tile = q_smem + consumer * kQGroupBytes;  // the current tile's Q slot
  constexpr bool kDeferredHandBack = Tiles::kLoops && kQSlots > 1;

  float acc_o[kHeadDim / 2];
  float acc_s[kBlockN / 2];
  unsigned p_frag[kPVSteps][4];
  float m_run[2];
  float l_run[2];

  // A product's descriptor, `bytes` into the tile at `tile`: stepped by one add from the tile's own
  // (`first`), or built anew. Stepping ran faster on an H200 at d = 64 (+2-4%) and under a causal mask (d =
  // 256 +5-10% at 512-2k keys, d = 128 under 1%), but d = 256 without a mask lost 1-1.4% at 512-1k keys
  // (docs/measurements/forward-hopper/uniform_group.md) until kSoftmaxUnderPV, with which it gains (above).
  constexpr bool kStepDescriptors = kHeadDim <= 128 || kMask != kernel::Mask::kNone || kSoftmaxUnderPV;
  const auto descriptor = [&](unsigned long long first, unsigned tile, unsigned bytes, unsigned leading) {
    return kStepDescriptors ? advance_descriptor(first, bytes)
                            : make_smem_descriptor<kPanelBytes>(tile + bytes, leading, 8 * kPanelBytes);
  };
  // S = Q K^T for the K tile in `stage`, issued and committed (not waited for).
  const auto issue_qk = [&](int stage) {
    const unsigned k_tile = k_smem + stage * kKVBytes;
    const unsigned long long q_desc = make_smem_descriptor<kPanelBytes>(q_tile, 16, 8 * kPanelBytes);
    const unsigned long long k_desc = make_smem_descriptor<kPanelBytes>(k_tile, 16, 8 * kPanelBytes);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kQKSteps; ++step) {
      const unsigned panel = (step * 16) / kPanelElements;
      const unsigned inside = (step * 16) % kPanelElements * 2;  // bytes into the panel's rows
      const unsigned long long a = descriptor(q_desc, q_tile, panel * 64u * kPanelBytes + inside, 16);
      const unsigned long long b = descriptor(k_desc, k_tile, panel * unsigned(kBlockN) * kPanelBytes + inside, 16);
      Wgmma<T, kBlockN>::template ss<0>(acc_s, a, b, step > 0);
    }
    wgmma_commit();
  };
  // O += P V for the V tile in `stage`: V is the MN-major B operand (head dim contiguous), panels of the
  // head dim block_n rows apart, 16 keys per step.
  const auto issue_pv = [&](int stage) {
    constexpr unsigned kLeading = unsigned(kBlockN) * kPanelBytes;
    const unsigned v_tile = v_smem + stage * kKVBytes;
    const unsigned long long v_desc = make_smem_descriptor<kPanelBytes>(v_tile, kLeading, 8 * kPanelBytes);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kPVSteps; ++step) {
      const unsigned long long b = descriptor(v_desc, v_tile, step * 16u * kPanelBytes, kLeading);
      Wgmma<T, kHeadDim>::template rs<1>(acc_o, p_frag[step], b, 1);
    }
    wgmma_commit();
  };
  // Ping-pong: named barrier 1 + g is group g's turn to issue products; both groups (256 threads) count on
  // it, the owner waiting, the other arriving when it has issued its own.
  const auto wait_turn = [&]() {
    if constexpr (kPingPong) named_barrier_sync(1 + consumer, 256);
  };
  const auto pass_turn = [&]() {
    if constexpr (kPingPong) named_barrier_arrive(1 + (consumer ^ 1), 256);
  };
  // Each consumer warp arrives once it no longer reads the buffer.
  const auto release = [&](unsigned bar) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bar);
  };
  // The lane's two rows go through the softmax together, each in two chains (online_softmax.cuh), except at
  // d = 64 without a mask on four groups, where the exponentials bound the kernel: one row after the other
  // keeps the MUFU busy under the next row's max. On an H200 together ran 1-5% faster at d = 96 and 128 and
  // at d = 64 causal, within 1.5% either way at d = 256, and 3-4% slower at d = 64 without a mask (A/B over
  // the grid: docs/measurements/forward-hopper/softmax_rows.md) until the exponentials ran under P V there
  // (kSoftmaxUnderPV: together +4-6% on 192x128 tiles).
  constexpr int kSoftmaxRows =
      kHeadDim == 64 && kMask == kernel::Mask::kNone && !kSoftmaxUnderPV ? 1 : 2;  // and chains per row
  // Scales, masks and exponentiates S of the key tile at n0 in place (this lane's rows are row0 and row0 + 8
  // of the group's 64 from group_m0); returns whether some row's maximum moved, and each row's O rescale
  // factor. Tiles without a mask fold the scale into the exponent. Key tiles go from the last to the first,
  // so without a causal mask only the first one visited can overhang the keys: the others need no check.
  // The first N columns only (N: a Columns<>), where the rows see no key after them.
  const auto softmax_columns = [&](auto columns, const KeyMask<kMask>& mask, long long group_m0, long long row0,
                                   long long n0, bool first_tile, float(&alpha)[2]) -> bool {
    constexpr int N = decltype(columns)::value;
    float scale = p.scale_log2;
    if ((kMask != kernel::Mask::kNone || first_tile) && mask.tile_needs_mask(group_m0, n0, N)) {
      // A hidden score is the one the scaled exponent takes to 0: -inf, +inf under a negative scale, so the
      // scale stays folded into the exponent (no multiply per score: +2.7% at d = 256 causal 4k-8k keys on an
      // H200, within 1% elsewhere). A zero scale maps every score to 0 first.
      if (scale == 0.f) {
#pragma unroll
        for (int i = 0; i < N / 2; ++i) acc_s[i] = 0.f;
        scale = 1.f;
      }
      const float hidden = scale > 0.f ? negative_infinity() : -negative_infinity();
      // Column 8t + e of this lane's slice is key n0 + 2 * (lane % 4) + 8t + e: compare the compile-time
      // offset with one limit per row (few registers, where the d = 256 tiles have none to spare).
      const long long first_col = n0 + 2 * (lane % 4);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long last = mask.last_visible(row0 + 8 * h) - first_col;
        const int limit = static_cast<int>(last < -1 ? -1 : last > N ? N : last);
#pragma unroll
        for (int t = 0; t < N / 8; ++t)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * t + e > limit) acc_s[4 * t + 2 * h + e] = hidden;
      }
    }
    return online_softmax_rows_unscaled<kSoftmaxRows, kSoftmaxRows, 4, N / 4>(
        m_run, l_run, scale, [&](int h, int j) -> float& { return acc_s[4 * (j / 2) + 2 * h + j % 2]; }, alpha);
  };
  const auto softmax = [&](const KeyMask<kMask>& mask, long long group_m0, long long row0, long long n0,
                           bool first_tile, float(&alpha)[2]) -> bool {
    return softmax_columns(Columns<kBlockN>{}, mask, group_m0, row0, n0, first_tile, alpha);
  };
  const auto pack_p = [&]() { pack_a_fragments<T>(acc_s, p_frag); };
  // Every product of the group has completed: O and the P fragments may be read and written again.
  const auto wait_pv = [&]() {
    wgmma_wait<0>();
    wgmma_hold(acc_o);
    wgmma_hold(p_frag);
  };

  // Ping-pong turns run on across tiles: both groups take num_n_blocks + 1 turns per tile. Group 1 passes
  // first and after each of its turns, so group 0 takes one more (empty) turn at exit: no arrival is left over.
  if (consumer == 1) pass_turn();
  int kv_reads = 0;  // K and V tiles consumed so far: the ring's position, as the producer counts it
  bool o_pending = false;  // kOInKV: the group's last O went out through a K or V buffer, not yet handed back
  tiles.consume([&](const WorkTile& w) {
    const int local = w.local;
    const Block block(p, w.tile, true);
    // Key tiles of this unit (a split tile's piece under kSplits: those from key_begin in visiting order).
    const int num_n_blocks = kSplits ? min(w.key_end, block.num_n_blocks) - w.key_begin : block.num_n_blocks;
    const long long group_m0 = block.m0 + 64 * consumer;
    const long long row0 = group_m0 + 16 * warp_in_group + lane / 4;  // this lane's rows: row0 and row0 + 8
    const KeyMask<kMask> mask{p.seqlen_kv, block.diag};
#pragma unroll
    for (int h = 0; h < 2; ++h) m_run[h] = negative_infinity(), l_run[h] = 0.f;
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) acc_o[i] = 0.f;

    const int q_slot = local % kQSlots;
    if constexpr (kQSlots > 1) q_tile = q_smem + (q_slot * kConsumers + consumer) * kQGroupBytes;
    mbarrier_wait(q_full(consumer, q_slot), (local / kQSlots) & 1);
    // With two Q slots the previous tile's O store is waited for here, under this tile's first products
    // rather than before them; its slot is next written by the tile after this one. Under kOInKV, once per
    // tile whose O went out through K or V (a second call does nothing).
    const auto hand_back_previous = [&]() {
      if constexpr (kDeferredHandBack)
        if (local > 0 && tid % 128 == 0) {
          tma_store_wait_read();
          mbarrier_arrive(q_empty(consumer, (local - 1) % kQSlots));
        }
      if constexpr (kOInKV) {
        if (o_pending && tid % 128 == 0) {
          tma_store_wait_read();
          mbarrier_arrive(o_stored);
        }
        o_pending = false;
      }
    };
    if (num_n_blocks == 0) hand_back_previous();
    const auto stage_of = [&](int i) { return (kv_reads + i) % kStages; };
    const auto phase_of = [&](int i) { return unsigned((kv_reads + i) / kStages) & 1u; };
    // Under a causal mask, where a key tile is no wider than the rows of the groups after the first, the
    // first groups' rows see none of the block's last key tiles (the first visited), and a group whose rows
    // all lie past the end sees none: such a group hands those tiles back unread and passes their turns. It
    // waits for each to be full first, so its arrival cannot count for another group's previous use. On an
    // H200 this ran +3-6% at d = 256 causal 512-2k keys (128x64 tiles, persistent), but the one-tile kernel
    // lost 3-9% at 4k keys (the ring's position is no longer a compile-time 0 there), 128x128 tiles 1.5% at
    // 512 keys (they seldom skip), and the unmasked kernel 6-8% at d = 64 (192x128 tiles, skipping only
    // groups past the end): only persistent causal kernels of tiles that skip take it.
    int n_blocks = num_n_blocks;  // key tiles this group computes
    // One past the key tile it visits first: the group's visit i computes key tile n_top - 1 - i.
    int n_top = kSplits ? block.num_n_blocks - w.key_begin : num_n_blocks;
    if constexpr (kMask != kernel::Mask::kNone && Tiles::kLoops && kBlockN <= kBlockM - 64) {
      n_blocks = group_m0 >= p.seqlen_q ? 0 : block.key_blocks(p, group_m0 + 64);
      // The producer may hold the skipped tiles' loads for the previous O's store.
      if constexpr (kOInKV)
        if (n_blocks < num_n_blocks) hand_back_previous();
      for (int i = 0; i < num_n_blocks - n_blocks; ++i) {
        mbarrier_wait(k_full(stage_of(i)), phase_of(i));
        release(k_empty(stage_of(i)));
        mbarrier_wait(v_full(stage_of(i)), phase_of(i));
        release(v_empty(stage_of(i)));
        wait_turn();
        pass_turn();
      }
      kv_reads += num_n_blocks - n_blocks;
      n_top = n_blocks;
      if (num_n_blocks > 0 && n_blocks == 0) {  // the turn of the last P V
        wait_turn();
        pass_turn();
        hand_back_previous();
        if constexpr (kOInKV) release(q_empty(consumer, q_slot));  // unread
      }
    }
    if (n_blocks > 0) {
      float alpha[2];
      const long long first_n0 = static_cast<long long>(n_top - 1) * kBlockN;
      mbarrier_wait(k_full(stage_of(0)), phase_of(0));
      wait_turn();
      issue_qk(stage_of(0));
      pass_turn();
      hand_back_previous();
      wgmma_wait<0>();
      wgmma_hold(acc_s);
      release(k_empty(stage_of(0)));
      // Under a causal mask a group whose rows see only the first kNarrowN keys of its first tile (group 0 of
      // a 128x128 tile on the diagonal) exponentiates only those; P is zero past them.
      if (kNarrowFirst && mask.last_visible(group_m0 + 63) < first_n0 + kNarrowN) {
        softmax_columns(Columns<kNarrowN>{}, mask, group_m0, row0, first_n0, true, alpha);
#pragma unroll
        for (int i = kNarrowN / 2; i < kBlockN / 2; ++i) acc_s[i] = 0.f;
      } else {
        softmax(mask, group_m0, row0, first_n0, true, alpha);
      }
      pack_p();
      for (int i = 1; i < n_blocks; ++i) {
        const int stage = stage_of(i);
        const int prev = stage_of(i - 1);
        mbarrier_wait(k_full(stage), phase_of(i));
        if constexpr (!kWaitVUnderQK) mbarrier_wait(v_full(prev), phase_of(i - 1));
        wait_turn();
        issue_qk(stage);
        if constexpr (kWaitVUnderQK) mbarrier_wait(v_full(prev), phase_of(i - 1));
        issue_pv(prev);
        pass_turn();
        wgmma_wait<1>();  // S is done; P V may still run
        wgmma_hold(acc_s);
        release(k_empty(stage));
        const bool moved =
            softmax(mask, group_m0, row0, static_cast<long long>(n_top - 1 - i) * kBlockN, false, alpha);
        // Once the running maxima settle most tiles move none of the warp's: skip the rescale then.
        const auto rescale_o = [&]() {
#pragma unroll
          for (int t = 0; t < kOTiles; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[4 * t + e] *= alpha[e / 2];
        };
        if constexpr (kSoftmaxUnderPV) {
          // The wait in each arm of a branch, its own basic block, so that ptxas keeps it after the softmax.
          // wgmma.wait_group is .aligned: every warp of the group must take the same arm, so the branch is on
          // the step, the same for the whole group (on each warp's own moved vote the warps diverged there,
          // synccheck's warpgroup MMA sequence error). The last step rescales unconditionally, which keeps the
          // arms distinct; alpha is exactly 1 for rows whose maximum did not move.
          if (i + 1 < n_blocks) {
            wait_pv();
            if (__any_sync(0xffffffffu, moved)) rescale_o();
          } else {
            wait_pv();
            rescale_o();
          }
          release(v_empty(prev));
        } else {
          wait_pv();
          release(v_empty(prev));
          if (__any_sync(0xffffffffu, moved)) rescale_o();
        }
        pack_p();
      }
      if constexpr (kOInKV) release(q_empty(consumer, q_slot));
      const int last = stage_of(n_blocks - 1);
      mbarrier_wait(v_full(last), phase_of(n_blocks - 1));
      wait_turn();
      issue_pv(last);
      pass_turn();
      wait_pv();
      release(v_empty(last));
      kv_reads += n_blocks;
    }

    // A split tile's piece: one that ends before the tile's last key tile leaves O, m and l in the block's slot
    // and ends there (with two Q slots the slot goes back under the next unit, as after a store); the one
    // that holds the last key tiles, which its block computes at the end of its run, folds in the slots of
    // the lower-numbered blocks whose runs end inside this tile, then stores O.
    if constexpr (kSplits) {
      const int whole = p.whole_tiles;
      if (w.tile >= whole) {
        const SplitTilePartials<kShape.split_slot_chunks(), kConsumers> partials{
            work, kShape.split_slots_offset(gridDim.x)};
        const int block_id = blockIdx.x;
        if (w.key_end < tiles.key_tiles) {
          partials.store(block_id, consumer, tid % 128, 3 + consumer, acc_o, m_run, l_run);
          if constexpr (!kDeferredHandBack)
            if (tid % 128 == 0) mbarrier_arrive(q_empty(consumer, q_slot));
          return;
        }
        const int tile_begin = (w.tile - whole) * tiles.key_tiles;
        // Blocks b < this one whose runs end inside the tile, but for empty runs (fewer units than blocks).
        for (int b = block_id - 1, end = tiles.split_begin(block_id); b >= 0 && end > tile_begin; --b) {
          const int begin = tiles.split_begin(b);
          if (end > begin) partials.merge(b, consumer, tid % 128, 3 + consumer, acc_o, m_run, l_run);
          end = begin;
        }
      }
    }

    // Epilogue: O / l as 16-bit into the group's Q tile (its last reader, the final Q K^T, has completed), in
    // the swizzled layout the O map stores from; then one thread stores it and, once the store has read the
    // tile, hands it back to the producer (with two Q slots, during the next tile). In a tile loop the
    // addresses come from opaque copies, computed here per tile.
    // Recomputed, not held through the main loop, where registers are short.
    const Block out(p, w.tile, true);
    float* lse_row = out.lse;
    const int lane_e = Tiles::kLoops ? opaque(lane) : lane;
    unsigned o_tile = Tiles::kLoops ? opaque(q_tile) : q_tile;
    const bool o_in_kv = kOInKV && num_n_blocks > 0;  // the same for both groups
    if (o_in_kv) {
      o_tile = (consumer == 0 ? k_smem : v_smem) + unsigned((kv_reads - 1) % kStages) * kKVBytes;
      named_barrier_sync(5, 256);  // both groups' last products have read that K and V (3, 4: per group)
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = row_lanes_sum<4>(l_run[h]);
      const float inv_l = inverse_row_sum(l);
      const int r = 16 * warp_in_group + lane_e / 4 + 8 * h;
#pragma unroll
      for (int t = 0; t < kOTiles; ++t) {
        const int col = 8 * t + 2 * (lane_e % 4);
        const unsigned address = o_tile + (col / kPanelElements) * 64u * kPanelBytes +
                                 Panel::offset(r, (col % kPanelElements) * 2);
        const unsigned packed = pack2<T>(acc_o[4 * t + 2 * h] * inv_l, acc_o[4 * t + 2 * h + 1] * inv_l);
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(packed) : "memory");
      }
      if (lse_row && lane % 4 == 0 && row0 + 8 * h < p.seqlen_q) lse_row[row0 + 8 * h] = row_lse(m_run[h], l);
    }
    fence_async_shared();
    named_barrier_sync(3 + consumer, 128);  // ids 1 and 2 are the ping-pong turns
    if (tid % 128 == 0) {
      for (int panel = 0; panel < kPanels; ++panel)
        tma_store_4d(o_map, o_tile + panel * 64u * kPanelBytes, panel * kPanelElements, static_cast<int>(group_m0),
                     out.head, out.batch);
      tma_store_commit();
      if (!kDeferredHandBack && !o_in_kv) {
        tma_store_wait_read();
        if constexpr (Tiles::kLoops) mbarrier_arrive(q_empty(consumer, q_slot), kOInKV ? 4u : 1u);
      }
    }
    if constexpr (kOInKV) o_pending = o_in_kv;
  });
  if ((kDeferredHandBack || kOInKV) && tid % 128 == 0) tma_store_wait_read();  // the last tile's store
  if (consumer == 0) wait_turn();
}

}  // namespace flashrtc

#pragma once
// The Hopper forward kernel's producer (attention_forward_wgmma.cuh): one thread of warp group 0 claims the
// block's work tiles (tile_scheduler.cuh) and issues every TMA load: per tile the consumer groups' Q tiles,
// then the K and V tiles of its keys into the ring of `stages` buffers, which runs on across tiles so that
// the next tile's keys load under this one's epilogue.
#include "flashrtc/forward_params.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/tile_scheduler.cuh"
#include "flashrtc/wgmma_forward_traits.cuh"

namespace flashrtc {

// The producer thread's loads, over references to its counters, which wgmma_forward_produce holds as separate
// variables in this order: as members of this struct, or in another order, the compiler numbers them
// differently, and ptxas makes other machine code of the same loads.
template <class Traits>
struct WgmmaForwardProducer {
  using Block = typename Traits::Block;

  const typename Traits::Params& p;
  const TmaDescriptor& q_map;
  const TmaDescriptor& k_map;
  const TmaDescriptor& v_map;
  const WgmmaForwardSmem<Traits>& smem;
  // kOInKV: per stage (two bits each), 2 + the parity of the "O stored" phase its next load waits for, or 0.
  unsigned& o_waits;
  int& kv_loads;  // K and V tiles issued so far: the ring's position
  // kOInKV: the tiles whose O went through K and V so far. Two words with o_waits: the producer has 24
  // registers.
  unsigned& o_tiles;

  // The consumer groups' Q tiles of the block's local-th tile, into its slot once the slot's previous tile
  // has been stored.
  __device__ __forceinline__ void load_q(const Block& block, int local) const {
    const int slot = local % Traits::kQSlots;
    for (int g = 0; g < Traits::kConsumers; ++g) {
      mbarrier_wait(smem.q_empty(g, slot), ((local / Traits::kQSlots) & 1) ^ 1);
      // The full box's bytes even where it hangs past the end: TMA counts the zeros it fills in.
      mbarrier_arrive_expect_tx(smem.q_full(g, slot), Traits::kQGroupBytes);
#pragma unroll 1
      for (int panel = 0; panel < Traits::kPanels; ++panel)
        tma_load_4d(smem.q_smem + (slot * Traits::kConsumers + g) * Traits::kQGroupBytes +
                        panel * 64u * Traits::kPanelBytes,
                    q_map, smem.q_full(g, slot), panel * Traits::kPanelElements,
                    static_cast<int>(block.m0) + 64 * g + Traits::first_q_row(block), block.head,
                    Traits::map_batch(block));
    }
  }
  // The K (load_k) or V (load_v) tile at key n0 into ring position `pos`, once the stage's previous tile has
  // been read.
  __device__ __forceinline__ void load_kv(const Block& block, const TmaDescriptor& map, unsigned tiles_smem,
                                          unsigned full, unsigned empty, int pos, int n0) const {
    mbarrier_wait(empty, ((pos / Traits::kStages) & 1) ^ 1);
    mbarrier_arrive_expect_tx(full, Traits::kKVBytes);
#pragma unroll 1
    for (int panel = 0; panel < Traits::kPanels; ++panel)
      tma_load_4d(tiles_smem + (pos % Traits::kStages) * Traits::kKVBytes +
                      panel * unsigned(Traits::kBlockN) * Traits::kPanelBytes,
                  map, full, panel * Traits::kPanelElements, n0 + Traits::first_key_row(block), block.kv_head,
                  Traits::map_batch(block));
  }
  __device__ __forceinline__ void load_k(const Block& block, int pos, int n0) {
    const int stage = pos % Traits::kStages;
    // The first load into the stage where an earlier tile's O was left waits for its store (K comes before V
    // at every position).
    if constexpr (Traits::kOInKV) {
      const unsigned wait = (o_waits >> (2 * stage)) & 3u;
      if (wait != 0) {
        mbarrier_wait(smem.o_stored(), wait & 1u);
        o_waits &= ~(3u << (2 * stage));
      }
    }
    load_kv(block, k_map, smem.k_smem, smem.k_full(stage), smem.k_empty(stage), pos, n0);
  }
  __device__ __forceinline__ void load_v(const Block& block, int pos, int n0) const {
    load_kv(block, v_map, smem.v_smem, smem.v_full(pos % Traits::kStages),
            smem.v_empty(pos % Traits::kStages), pos, n0);
  }

  // Every load of one unit of work: Q, and the unit's key tiles in visiting order (all of them, or a split
  // tile's piece), the last key tile first. Q goes after the first K tile (Q waits for the previous tile's
  // epilogue, which K need not); under kKAhead K(i + 1) goes before V(i), else K(i) and V(i) go together.
  __device__ __forceinline__ void load_unit(const WorkTile& w) {
    const int local = w.local;
    const Block block(p, w.tile, true);
    const int first = Traits::kSplits ? w.key_begin : 0;
    const int end = Traits::kSplits ? min(w.key_end, block.num_n_blocks) : block.num_n_blocks;
    const auto key_n0 = [&](int i) { return (block.num_n_blocks - 1 - i) * Traits::kBlockN; };
    if constexpr (Traits::kKAhead) {
      const int base = kv_loads - first;  // key tile i goes to ring position base + i
      if (first < end) load_k(block, base + first, key_n0(first));
      load_q(block, local);
      for (int i = first; i < end; ++i) {
        if (i + 1 < end) load_k(block, base + i + 1, key_n0(i + 1));
        load_v(block, base + i, key_n0(i));
      }
      kv_loads += end - first;
    } else {
      if (first == end) load_q(block, local);
      for (int i = first; i < end; ++i) {
        load_k(block, kv_loads, key_n0(i));
        if (i == first) load_q(block, local);
        load_v(block, kv_loads, key_n0(i));
        ++kv_loads;
      }
    }
    if constexpr (Traits::kOInKV)
      if (first < end) {
        o_waits |= (2u | (o_tiles & 1u)) << (2 * ((kv_loads - 1) % Traits::kStages));
        ++o_tiles;
      }
  }
};

// By the producer thread: every load of the block's units of work.
template <class Traits>
__device__ __forceinline__ void wgmma_forward_produce(const typename Traits::Params& p,
                                                      const TmaDescriptor& q_map, const TmaDescriptor& k_map,
                                                      const TmaDescriptor& v_map,
                                                      const WgmmaForwardSmem<Traits>& smem,
                                                      const typename Traits::Tiles& tiles) {
  tma_prefetch_descriptor(q_map);
  tma_prefetch_descriptor(k_map);
  tma_prefetch_descriptor(v_map);
  unsigned o_waits = 0;
  int kv_loads = 0;
  unsigned o_tiles = 0;
  WgmmaForwardProducer<Traits> producer{p, q_map, k_map, v_map, smem, o_waits, kv_loads, o_tiles};
  tiles.produce([&](const WorkTile& w) { producer.load_unit(w); });
}

}  // namespace flashrtc

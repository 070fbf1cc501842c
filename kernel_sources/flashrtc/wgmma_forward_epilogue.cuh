#pragma once
// The Hopper forward kernel's consumer epilogue (attention_forward_wgmma.cuh), once a unit's key tiles are
// done: a split tile's piece left for or merged from other blocks (split_tile_partials.cuh), then O / l and
// lse. O leaves through shared memory (the group's Q tile, or under kOInKV the last K or V buffer) and a TMA
// store, which clips rows past the end; lse is written from registers. The group's "Q empty" barrier tells
// the producer when the store has read the tile, so the next Q may overwrite it.
#include "flashrtc/forward_epilogue.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/opaque.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/split_tile_partials.cuh"
#include "flashrtc/tile_scheduler.cuh"
#include "flashrtc/wgmma_forward_consumer.cuh"
#include "flashrtc/wgmma_forward_traits.cuh"

namespace flashrtc {

// A split tile's piece (Traits::kSplits only): one that ends before the tile's last key tile leaves O, m and
// l in the block's slot and ends there (with two Q slots the slot goes back under the next unit, as after a
// store); the one that holds the last key tiles, which its block computes at the end of its run, folds in the
// slots of the lower-numbered blocks whose runs end inside this tile, then stores O. Returns whether the unit
// goes on to store O.
template <class Traits>
__device__ __forceinline__ bool wgmma_forward_split_tile(WgmmaForwardConsumer<Traits>& c, const WorkTile& w,
                                                         const WgmmaForwardUnit<Traits::kMask>& u,
                                                         const typename Traits::Tiles& tiles,
                                                         unsigned* work) {
  constexpr WgmmaForwardShape kShape = Traits::kShape;
  const int whole = c.p.whole_tiles;
  if (w.tile >= whole) {
    const SplitTilePartials<kShape.split_slot_chunks(), Traits::kConsumers> partials{
        work, kShape.split_slots_offset(gridDim.x)};
    const int block_id = blockIdx.x;
    if (w.key_end < tiles.key_tiles) {
      partials.store(block_id, c.consumer, c.tid % 128, 3 + c.consumer, c.acc_o, c.m_run, c.l_run);
      if constexpr (!Traits::kDeferredHandBack)
        if (c.tid % 128 == 0) mbarrier_arrive(c.smem.q_empty(c.consumer, u.q_slot));
      return false;
    }
    const int tile_begin = (w.tile - whole) * tiles.key_tiles;
    // Blocks b < this one whose runs end inside the tile, but for empty runs (fewer units than blocks).
    for (int b = block_id - 1, end = tiles.split_begin(block_id); b >= 0 && end > tile_begin; --b) {
      const int begin = tiles.split_begin(b);
      if (end > begin) partials.merge(b, c.consumer, c.tid % 128, 3 + c.consumer, c.acc_o, c.m_run, c.l_run);
      end = begin;
    }
  }
  return true;
}

// The first `rows` (< 64) of a group's O tile in shared memory (swizzled panels, as the O map stores them),
// each 16-byte chunk by one of the group's 128 threads (t: the thread's index in the group), to the rows from
// group_m0 of o (the block's first row, its head).
template <class Traits>
__device__ __forceinline__ void wgmma_forward_store_rows(unsigned o_tile, typename Traits::T* o,
                                                         long long o_stride_seq, long long group_m0,
                                                         long long rows, int t) {
  constexpr int kChunks = Traits::kHeadDim / 8;  // 16-byte chunks of a row
  constexpr int kPanelElements = Traits::kPanelElements;
  const int chunks = static_cast<int>(rows) * kChunks;
  for (int i = t; i < chunks; i += 128) {
    const int r = i / kChunks;
    const int col = i % kChunks * 8;
    const unsigned address = o_tile + (col / kPanelElements) * 64u * Traits::kPanelBytes +
                             Traits::Panel::offset(r, (col % kPanelElements) * 2);
    uint4 chunk;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(chunk.x), "=r"(chunk.y), "=r"(chunk.z), "=r"(chunk.w)
                 : "r"(address)
                 : "memory");
    *reinterpret_cast<uint4*>(o + (group_m0 + r) * o_stride_seq + col) = chunk;
  }
}

// O / l as 16-bit into the group's Q tile (its last reader, the final Q K^T, has completed), in the swizzled
// layout the O map stores from, and lse; then one thread stores O and, once the store has read the tile,
// hands it back to the producer (with two Q slots, during the next unit). In a tile loop the addresses come
// from opaque copies, computed here per tile.
template <class Traits>
__device__ __forceinline__ void wgmma_forward_store(WgmmaForwardConsumer<Traits>& c, const WorkTile& w,
                                                    const WgmmaForwardUnit<Traits::kMask>& u,
                                                    const TmaDescriptor& o_map) {
  using Tiles = typename Traits::Tiles;
  using Panel = typename Traits::Panel;
  constexpr int kPanelBytes = Traits::kPanelBytes;
  constexpr int kPanelElements = Traits::kPanelElements;
  const typename Traits::Params& p = c.p;
  const int lane = c.lane;
  // Recomputed, not held through the main loop, where registers are short.
  const typename Traits::Block out(p, w.tile, true);
  float* lse_row = out.lse;
  const int lane_e = Tiles::kLoops ? opaque(lane) : lane;
  unsigned o_tile = Tiles::kLoops ? opaque(c.q_tile) : c.q_tile;
  const bool o_in_kv = Traits::kOInKV && u.num_n_blocks > 0;  // the same for both groups
  if (o_in_kv) {
    o_tile = (c.consumer == 0 ? c.smem.k_smem : c.smem.v_smem) +
             unsigned((c.kv_reads - 1) % Traits::kStages) * Traits::kKVBytes;
    named_barrier_sync(5, 256);  // both groups' last products have read that K and V (3, 4: per group)
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = row_lanes_sum<4>(c.l_run[h]);
    const float inv_l = inverse_row_sum(l);
    const int r = 16 * c.warp_in_group + lane_e / 4 + 8 * h;
#pragma unroll
    for (int t = 0; t < Traits::kOTiles; ++t) {
      const int col = 8 * t + 2 * (lane_e % 4);
      const unsigned address =
          o_tile + (col / kPanelElements) * 64u * kPanelBytes + Panel::offset(r, (col % kPanelElements) * 2);
      const unsigned packed =
          pack2<typename Traits::T>(c.acc_o[4 * t + 2 * h] * inv_l, c.acc_o[4 * t + 2 * h + 1] * inv_l);
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(packed) : "memory");
    }
    if (lse_row && lane % 4 == 0 && u.row0 + 8 * h < out.seqlen_q(p))
      lse_row[u.row0 + 8 * h] = row_lse(c.m_run[h], l);
  }
  fence_async_shared();
  named_barrier_sync(3 + c.consumer, 128);  // ids 1 and 2 are the ping-pong turns
  if constexpr (Traits::kVarlen) {
    // A group whose 64 rows run past its sequence's end: the rows after it are the next sequence's, which
    // a TMA box would overwrite (a race with that sequence's blocks). Its threads store the sequence's rows.
    const long long rows = out.seqlen_q(p) - u.group_m0;
    if (rows < 64) {
      wgmma_forward_store_rows<Traits>(o_tile, out.o, kernel::dense_params(p).o_stride_seq, u.group_m0, rows,
                                       c.tid % 128);
      return;
    }
  }
  if (c.tid % 128 == 0) {
    for (int panel = 0; panel < Traits::kPanels; ++panel)
      tma_store_4d(o_map, o_tile + panel * 64u * kPanelBytes, panel * kPanelElements,
                   static_cast<int>(u.group_m0) + Traits::first_q_row(out), out.head, Traits::map_batch(out));
    tma_store_commit();
    if (!Traits::kDeferredHandBack && !o_in_kv) {
      tma_store_wait_read();
      if constexpr (Tiles::kLoops)
        mbarrier_arrive(c.smem.q_empty(c.consumer, u.q_slot), Traits::kOInKV ? 4u : 1u);
    }
  }
  if constexpr (Traits::kOInKV) c.o_pending = o_in_kv;
}

}  // namespace flashrtc

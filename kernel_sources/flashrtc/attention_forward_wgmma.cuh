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
// copy, the other threads give their registers away and leave (wgmma_forward_producer.cuh). Each other warp
// group consumes 64 query rows: S = Q K^T, the online softmax and O += P V per key tile, the key tiles from
// the last to the first, so the ones that need a mask (the causal diagonal, the end of the keys) come first
// (wgmma_forward_consumer.cuh); then O and lse (wgmma_forward_epilogue.cuh). Buffers are handed over by
// mbarriers: "full" ones the TMA completes, "empty" ones each consumer warp arrives on once its products have
// read the buffer. The specialization's compile-time choices and its shared-memory map:
// wgmma_forward_traits.cuh.
//
// kVarlen: the variable-length forward over the sequences of a packed call (docs/varlen.md), on the grid of
// one block per (sequence, head, query block of max_seqlen_q): each block is moved onto its sequence where
// it is made (VarlenForwardBlock), its TMA coordinates start at the sequence's first rows, and a group whose
// rows run past the sequence's end stores its rows itself. Without it none of that is compiled.
#include "flashrtc/forward_params.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/tile_scheduler.cuh"
#include "flashrtc/wgmma_forward_consumer.cuh"
#include "flashrtc/wgmma_forward_epilogue.cuh"
#include "flashrtc/wgmma_forward_producer.cuh"
#include "flashrtc/wgmma_forward_traits.cuh"

namespace flashrtc {

// The maps are rank 4 over [batch, seq, head, dim] tensors, innermost first: (dim, seq, head, batch). A box
// is one panel of rows: (panel elements, rows, 1, 1), rows = 64 for Q and O, block_n for K and V.
// work: the launch's work buffer: a zeroed counter where the kernel claims tiles (kPersistent under a causal
// mask), the split tiles' flags and slots where p.whole_tiles < p.num_blocks (kStrideSplit), else unused.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kPersistent, bool kVarlen = false>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_forward_wgmma(const __grid_constant__ typename kernel::ForwardParamsOf<kVarlen>::type p,
                            const __grid_constant__ TmaDescriptor q_map,
                            const __grid_constant__ TmaDescriptor k_map,
                            const __grid_constant__ TmaDescriptor v_map,
                            const __grid_constant__ TmaDescriptor o_map, unsigned* work) {
  using Traits =
      WgmmaForwardTraits<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMask, kPersistent, kVarlen>;
  using Block = typename Traits::Block;
  // Every thread alike, before any barrier: a block whose first row lies past its sequence's end has no work.
  if constexpr (kVarlen)
    if (!Block(p, blockIdx.x, true).live) return;

  extern __shared__ unsigned char smem_raw[];
  const WgmmaForwardSmem<Traits> smem(smem_raw);
  const kernel::ForwardParams& dense = kernel::dense_params(p);
  const typename Traits::Tiles tiles{dense.num_blocks,       work,
                                     smem.scheduler(),       dense.whole_tiles,
                                     dense.split_key_tiles,  dense.split_run,
                                     dense.split_longer_runs};
  const int tid = threadIdx.x;
  const int group = Traits::kUniformGroup ? __shfl_sync(0xffffffffu, tid / 128, 0) : tid / 128;
  const int warp = tid / 32;
  const int lane = tid % 32;

  if (tid == 0) {
    smem.init_barriers();
    tiles.init();
    fence_barrier_init();
  }
  __syncthreads();

  if (group == 0) {
    registers_decrease_to<Traits::kShape.producer_registers()>();
    if (warp == 0 && elect_one_lane()) wgmma_forward_produce<Traits>(p, q_map, k_map, v_map, smem, tiles);
    return;
  }

  registers_increase_to<Traits::kShape.consumer_registers()>();
  // The consumer's registers (WgmmaForwardConsumer works on them).
  const int consumer = group - 1;
  const int warp_in_group = warp % 4;
  unsigned q_tile = smem.q_smem + consumer * Traits::kQGroupBytes;
  float acc_o[kHeadDim / 2];
  float acc_s[kBlockN / 2];
  unsigned p_frag[Traits::kPVSteps][4];
  float m_run[2];
  float l_run[2];
  int kv_reads = 0;
  bool o_pending = false;
  WgmmaForwardConsumer<Traits> mainloop{p,     smem,  tid,    consumer, warp_in_group, lane,     q_tile,
                                        acc_o, acc_s, p_frag, m_run,    l_run,         kv_reads, o_pending};
  // Ping-pong turns run on across tiles: both groups take num_n_blocks + 1 turns per tile. Group 1 passes
  // first and after each of its turns, so group 0 takes one more (empty) turn at exit: no arrival is left
  // over.
  if (consumer == 1) mainloop.pass_turn();
  tiles.consume([&](const WorkTile& w) {
    const Block block(p, w.tile, true);
    const WgmmaForwardUnit<kMask> unit = mainloop.start_unit(w, block);
    mainloop.compute_unit(w, block, unit);
    // Only where tiles split: an inlined call that returns true at once still changes the machine code.
    if constexpr (Traits::kSplits)
      if (!wgmma_forward_split_tile(mainloop, w, unit, tiles, work)) return;
    wgmma_forward_store(mainloop, w, unit, o_map);
  });
  if ((Traits::kDeferredHandBack || Traits::kOInKV) && tid % 128 == 0)
    tma_store_wait_read();  // the last tile's store
  if (consumer == 0) mainloop.wait_turn();
}

}  // namespace flashrtc

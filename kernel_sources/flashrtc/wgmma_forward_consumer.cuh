#pragma once
// The Hopper forward kernel's consumer main loop (attention_forward_wgmma.cuh): one warp group's 64 query
// rows of a unit of work against its key tiles, the last key tile first:
//   S = Q K^T     wgmma, both operands from shared memory;
//   softmax       running max and sum per row in registers, exp2 with the scale folded in;
//   O += P V      wgmma with P from registers (S's accumulators packed to 16 bits are its A fragments) and
//                 V, row-major in shared memory, read transposed.
// While the softmax of key tile j runs, the tensor cores compute P(j-1) V(j-1), issued with S(j). Between two
// consumer groups of a d <= 128 tile the products "ping-pong": a token passed through named barriers lets one
// group issue its products while the other runs its softmax. Each consumer warp arrives on a buffer's
// "empty" barrier once its products have read it.
#include "flashrtc/forward_params.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/tile_scheduler.cuh"
#include "flashrtc/wgmma.cuh"
#include "flashrtc/wgmma_forward_traits.cuh"

namespace flashrtc {

// One unit of work as a consumer thread sees it.
template <kernel::Mask kMask>
struct WgmmaForwardUnit {
  int local;           // the block's local-th unit (WorkTile::local)
  int num_n_blocks;    // key tiles of the unit (a split tile's piece under kSplits: those from key_begin)
  long long group_m0;  // the group's first query row
  long long row0;      // this lane's rows: row0 and row0 + 8
  KeyMask<kMask> mask;
  int q_slot;  // the unit's Q slot
};

// One consumer thread's main loop, over references to the registers the kernel holds: O, S, P, the running
// max and sum, the current Q slot and the ring position. References, not members: with the arrays held in
// this struct the compiler generates other machine code for the same loop.
template <class Traits>
struct WgmmaForwardConsumer {
  using T = typename Traits::T;
  using Block = typename Traits::Block;
  using Tiles = typename Traits::Tiles;

  const typename Traits::Params& p;  // a packed call's: its sequences' lengths come with the block
  const WgmmaForwardSmem<Traits>& smem;
  const int& tid;
  const int& consumer;  // the consumer warp group: group - 1
  const int& warp_in_group;
  const int& lane;
  unsigned& q_tile;  // the current unit's Q slot
  float (&acc_o)[Traits::kHeadDim / 2];
  float (&acc_s)[Traits::kBlockN / 2];
  unsigned (&p_frag)[Traits::kPVSteps][4];
  float (&m_run)[2];
  float (&l_run)[2];
  int& kv_reads;    // K and V tiles consumed so far: the ring's position, as the producer counts it
  bool& o_pending;  // kOInKV: the group's last O went out through a K or V buffer, not yet handed back

  // A product's descriptor, `bytes` into the tile at `tile`: stepped by one add from the tile's own
  // (`first`), or built anew (Traits::kStepDescriptors).
  __device__ __forceinline__ static unsigned long long descriptor(unsigned long long first, unsigned tile,
                                                                  unsigned bytes, unsigned leading) {
    return Traits::kStepDescriptors
               ? advance_descriptor(first, bytes)
               : make_smem_descriptor<Traits::kPanelBytes>(tile + bytes, leading, 8 * Traits::kPanelBytes);
  }
  // S = Q K^T for the K tile in `stage`, issued and committed (not waited for).
  __device__ __forceinline__ void issue_qk(int stage) {
    const unsigned k_tile = smem.k_smem + stage * Traits::kKVBytes;
    const unsigned long long q_desc =
        make_smem_descriptor<Traits::kPanelBytes>(q_tile, 16, 8 * Traits::kPanelBytes);
    const unsigned long long k_desc =
        make_smem_descriptor<Traits::kPanelBytes>(k_tile, 16, 8 * Traits::kPanelBytes);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Traits::kQKSteps; ++step) {
      const unsigned panel = (step * 16) / Traits::kPanelElements;
      const unsigned inside = (step * 16) % Traits::kPanelElements * 2;  // bytes into the panel's rows
      const unsigned long long a = descriptor(q_desc, q_tile, panel * 64u * Traits::kPanelBytes + inside, 16);
      const unsigned long long b =
          descriptor(k_desc, k_tile, panel * unsigned(Traits::kBlockN) * Traits::kPanelBytes + inside, 16);
      Wgmma<T, Traits::kBlockN>::template ss<0>(acc_s, a, b, step > 0);
    }
    wgmma_commit();
  }
  // O += P V for the V tile in `stage`: V is the MN-major B operand (head dim contiguous), panels of the head
  // dim block_n rows apart, 16 keys per step.
  __device__ __forceinline__ void issue_pv(int stage) {
    constexpr unsigned kLeading = unsigned(Traits::kBlockN) * Traits::kPanelBytes;
    const unsigned v_tile = smem.v_smem + stage * Traits::kKVBytes;
    const unsigned long long v_desc =
        make_smem_descriptor<Traits::kPanelBytes>(v_tile, kLeading, 8 * Traits::kPanelBytes);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Traits::kPVSteps; ++step) {
      const unsigned long long b = descriptor(v_desc, v_tile, step * 16u * Traits::kPanelBytes, kLeading);
      Wgmma<T, Traits::kHeadDim>::template rs<1>(acc_o, p_frag[step], b, 1);
    }
    wgmma_commit();
  }
  // Ping-pong: named barrier 1 + g is group g's turn to issue products; both groups (256 threads) count on
  // it, the owner waiting, the other arriving when it has issued its own.
  __device__ __forceinline__ void wait_turn() const {
    if constexpr (Traits::kPingPong) named_barrier_sync(1 + consumer, 256);
  }
  __device__ __forceinline__ void pass_turn() const {
    if constexpr (Traits::kPingPong) named_barrier_arrive(1 + (consumer ^ 1), 256);
  }
  // kVarlen: the rows from keys_left on of the V tile in `stage` (the first key tile visited; its keys past
  // the sequence's end are the next sequence's, or spare ones past seqused_k) set to 0 before the group's
  // P V reads them: their P is 0, but 0 * inf or NaN would not be. Both groups write the same zeros, each
  // before its own product (the buffer goes back to the producer only after both), fenced for the async
  // proxy wgmma reads through. keys_left is the same for the whole group: every thread meets the barrier.
  __device__ __forceinline__ void clear_v_past_end(int stage, long long keys_left) const {
    if (keys_left >= Traits::kBlockN) return;
    const int first = keys_left < 0 ? 0 : static_cast<int>(keys_left);
    clear_panel_rows<Traits::kBlockN, Traits::kPanels, Traits::kPanelBytes>(
        smem.v_smem + stage * Traits::kKVBytes, first, tid % 128);
    fence_async_shared();
    named_barrier_sync(3 + consumer, 128);  // the epilogue's id: the group's own barrier
  }
  // Each consumer warp arrives once it no longer reads the buffer.
  __device__ __forceinline__ void release(unsigned bar) const {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bar);
  }

  // Scales, masks and exponentiates S of the key tile at n0 in place (this lane's rows are row0 and row0 + 8
  // of the group's 64 from group_m0); returns whether some row's maximum moved, and each row's O rescale
  // factor. Tiles without a mask fold the scale into the exponent. Key tiles go from the last to the first,
  // so without a causal mask only the first one visited can overhang the keys: the others need no check. The
  // first N columns only, where the rows see no key after them.
  template <int N>
  __device__ __forceinline__ bool softmax_columns(const KeyMask<Traits::kMask>& mask, long long group_m0,
                                                  long long row0, long long n0, bool first_tile,
                                                  float (&alpha)[2]) {
    float scale = kernel::dense_params(p).scale_log2;
    if ((Traits::kMask != kernel::Mask::kNone || first_tile) && mask.tile_needs_mask(group_m0, n0, N)) {
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
    return online_softmax_rows_unscaled<Traits::kSoftmaxRows, Traits::kSoftmaxRows, 4, N / 4>(
        m_run, l_run, scale, [&](int h, int j) -> float& { return acc_s[4 * (j / 2) + 2 * h + j % 2]; },
        alpha);
  }
  __device__ __forceinline__ bool softmax(const KeyMask<Traits::kMask>& mask, long long group_m0,
                                          long long row0, long long n0, bool first_tile, float (&alpha)[2]) {
    return softmax_columns<Traits::kBlockN>(mask, group_m0, row0, n0, first_tile, alpha);
  }
  __device__ __forceinline__ void pack_p() {
    pack_a_fragments<T>(acc_s, p_frag);
  }
  // Every product of the group has completed: O and the P fragments may be read and written again.
  __device__ __forceinline__ void wait_pv() {
    wgmma_wait<0>();
    wgmma_hold(acc_o);
    wgmma_hold(p_frag);
  }
  __device__ __forceinline__ void rescale_o(const float (&alpha)[2]) {
#pragma unroll
    for (int t = 0; t < Traits::kOTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * t + e] *= alpha[e / 2];
  }

  // Hands back what the group's previous unit still holds: with two Q slots its Q slot, once its O store has
  // read it (waited for here, under this unit's first products rather than before them; the slot is next
  // written by the unit after this one); under kOInKV, once per unit whose O went out through K or V, the K
  // or V buffer (a second call does nothing).
  __device__ __forceinline__ void hand_back_previous(int local) {
    if constexpr (Traits::kDeferredHandBack)
      if (local > 0 && tid % 128 == 0) {
        tma_store_wait_read();
        mbarrier_arrive(smem.q_empty(consumer, (local - 1) % Traits::kQSlots));
      }
    if constexpr (Traits::kOInKV) {
      if (o_pending && tid % 128 == 0) {
        tma_store_wait_read();
        mbarrier_arrive(smem.o_stored());
      }
      o_pending = false;
    }
  }
  // The ring's stage and phase of the unit's i-th key tile.
  __device__ __forceinline__ int stage_of(int i) const {
    return (kv_reads + i) % Traits::kStages;
  }
  __device__ __forceinline__ unsigned phase_of(int i) const {
    return unsigned((kv_reads + i) / Traits::kStages) & 1u;
  }

  // Starts a unit: O, m and l reset, its Q tile waited for.
  __device__ __forceinline__ WgmmaForwardUnit<Traits::kMask> start_unit(const WorkTile& w,
                                                                        const Block& block) {
    const int local = w.local;
    // Key tiles of this unit (a split tile's piece under kSplits: those from key_begin in visiting order).
    const int num_n_blocks =
        Traits::kSplits ? min(w.key_end, block.num_n_blocks) - w.key_begin : block.num_n_blocks;
    const long long group_m0 = block.m0 + 64 * consumer;
    const long long row0 = group_m0 + 16 * warp_in_group + lane / 4;
    const KeyMask<Traits::kMask> mask{block.seqlen_kv(p), block.diag};
#pragma unroll
    for (int h = 0; h < 2; ++h) m_run[h] = negative_infinity(), l_run[h] = 0.f;
#pragma unroll
    for (int i = 0; i < Traits::kHeadDim / 2; ++i) acc_o[i] = 0.f;

    const int q_slot = local % Traits::kQSlots;
    if constexpr (Traits::kQSlots > 1)
      q_tile = smem.q_smem + (q_slot * Traits::kConsumers + consumer) * Traits::kQGroupBytes;
    mbarrier_wait(smem.q_full(consumer, q_slot), (local / Traits::kQSlots) & 1);
    return {local, num_n_blocks, group_m0, row0, mask, q_slot};
  }

  // O, m and l of the unit's key tiles, in registers; every buffer handed back but the Q slot (the epilogue
  // writes O over it).
  __device__ __forceinline__ void compute_unit(const WorkTile& w, const Block& block,
                                               const WgmmaForwardUnit<Traits::kMask>& u) {
    const int num_n_blocks = u.num_n_blocks;
    const long long group_m0 = u.group_m0;
    const long long row0 = u.row0;
    const KeyMask<Traits::kMask>& mask = u.mask;
    if (num_n_blocks == 0) hand_back_previous(u.local);
    // Under a causal mask, where a key tile is no wider than the rows of the groups after the first, the
    // first groups' rows see none of the block's last key tiles (the first visited), and a group whose rows
    // all lie past the end sees none: such a group hands those tiles back unread and passes their turns. It
    // waits for each to be full first, so its arrival cannot count for another group's previous use. Only
    // persistent causal kernels of tiles that skip take it: on an H200 it gains 3-6% at d = 256 causal 512-2k
    // keys (128x64 tiles, persistent), and costs the one-tile kernel 3-9% at 4k keys (the ring's position is
    // no longer a compile-time 0 there), 128x128 tiles 1.5% at 512 keys (they seldom skip), and the unmasked
    // kernel 6-8% at d = 64 (192x128 tiles, skipping only groups past the end).
    int n_blocks = num_n_blocks;  // key tiles this group computes
    // One past the key tile it visits first: the group's visit i computes key tile n_top - 1 - i.
    int n_top = Traits::kSplits ? block.num_n_blocks - w.key_begin : num_n_blocks;
    if constexpr (Traits::kMask != kernel::Mask::kNone && Tiles::kLoops &&
                  Traits::kBlockN <= Traits::kBlockM - 64) {
      n_blocks = group_m0 >= p.seqlen_q ? 0 : block.key_blocks(p, group_m0 + 64);
      // The producer may hold the skipped tiles' loads for the previous O's store.
      if constexpr (Traits::kOInKV)
        if (n_blocks < num_n_blocks) hand_back_previous(u.local);
      for (int i = 0; i < num_n_blocks - n_blocks; ++i) {
        mbarrier_wait(smem.k_full(stage_of(i)), phase_of(i));
        release(smem.k_empty(stage_of(i)));
        mbarrier_wait(smem.v_full(stage_of(i)), phase_of(i));
        release(smem.v_empty(stage_of(i)));
        wait_turn();
        pass_turn();
      }
      kv_reads += num_n_blocks - n_blocks;
      n_top = n_blocks;
      if (num_n_blocks > 0 && n_blocks == 0) {  // the turn of the last P V
        wait_turn();
        pass_turn();
        hand_back_previous(u.local);
        if constexpr (Traits::kOInKV) release(smem.q_empty(consumer, u.q_slot));  // unread
      }
    }
    if (n_blocks > 0) {
      float alpha[2];
      const long long first_n0 = static_cast<long long>(n_top - 1) * Traits::kBlockN;
      mbarrier_wait(smem.k_full(stage_of(0)), phase_of(0));
      wait_turn();
      issue_qk(stage_of(0));
      pass_turn();
      hand_back_previous(u.local);
      wgmma_wait<0>();
      wgmma_hold(acc_s);
      release(smem.k_empty(stage_of(0)));
      // Under a causal mask a group whose rows see only the first kNarrowN keys of its first tile (group 0 of
      // a 128x128 tile on the diagonal) exponentiates only those; P is zero past them
      // (docs/measurements/forward-hopper/narrow_first_softmax.md).
      if (Traits::kNarrowFirst && mask.last_visible(group_m0 + 63) < first_n0 + Traits::kNarrowN) {
        softmax_columns<Traits::kNarrowN>(mask, group_m0, row0, first_n0, true, alpha);
#pragma unroll
        for (int i = Traits::kNarrowN / 2; i < Traits::kBlockN / 2; ++i) acc_s[i] = 0.f;
      } else {
        softmax(mask, group_m0, row0, first_n0, true, alpha);
      }
      pack_p();
      for (int i = 1; i < n_blocks; ++i) {
        const int stage = stage_of(i);
        const int prev = stage_of(i - 1);
        mbarrier_wait(smem.k_full(stage), phase_of(i));
        if constexpr (!Traits::kWaitVUnderQK) {
          mbarrier_wait(smem.v_full(prev), phase_of(i - 1));
          if constexpr (Traits::kVarlen)
            if (i == 1) clear_v_past_end(prev, mask.seqlen_kv - first_n0);
        }
        wait_turn();
        issue_qk(stage);
        if constexpr (Traits::kWaitVUnderQK) {
          mbarrier_wait(smem.v_full(prev), phase_of(i - 1));
          if constexpr (Traits::kVarlen)
            if (i == 1) clear_v_past_end(prev, mask.seqlen_kv - first_n0);  // the group's own barrier
        }
        issue_pv(prev);
        pass_turn();
        wgmma_wait<1>();  // S is done; P V may still run
        wgmma_hold(acc_s);
        release(smem.k_empty(stage));
        const bool moved = softmax(mask, group_m0, row0,
                                   static_cast<long long>(n_top - 1 - i) * Traits::kBlockN, false, alpha);
        // Once the running maxima settle most tiles move none of the warp's: skip the rescale then.
        if constexpr (Traits::kSoftmaxUnderPV) {
          // The wait in each arm of a branch, its own basic block, so that ptxas keeps it after the softmax.
          // wgmma.wait_group is .aligned: every warp of the group must take the same arm, so the branch is on
          // the step, the same for the whole group, not on each warp's own vote
          // (docs/measurements/sanitizers/rescale_branch_synccheck.md). The last step rescales unconditionally,
          // which keeps the arms distinct; alpha is exactly 1 for rows whose maximum did not move.
          if (i + 1 < n_blocks) {
            wait_pv();
            if (__any_sync(0xffffffffu, moved)) rescale_o(alpha);
          } else {
            wait_pv();
            rescale_o(alpha);
          }
          release(smem.v_empty(prev));
        } else {
          wait_pv();
          release(smem.v_empty(prev));
          if (__any_sync(0xffffffffu, moved)) rescale_o(alpha);
        }
        pack_p();
      }
      if constexpr (Traits::kOInKV) release(smem.q_empty(consumer, u.q_slot));
      const int last = stage_of(n_blocks - 1);
      mbarrier_wait(smem.v_full(last), phase_of(n_blocks - 1));
      if constexpr (Traits::kVarlen)
        if (n_blocks == 1) clear_v_past_end(last, mask.seqlen_kv - first_n0);
      wait_turn();
      issue_pv(last);
      pass_turn();
      wait_pv();
      release(smem.v_empty(last));
      kv_reads += n_blocks;
    }
  }
};

}  // namespace flashrtc

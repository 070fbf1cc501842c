#pragma once
// dQ of backward attention for Hopper (sm_90a), fp16 / bf16 with fp32 accumulation: the atomic-free dQ pass
// of attention_backward_dq_mma.cuh with TMA loads, wgmma products and warp specialization.
//
// One thread block per (batch, query head, block_m queries). Warp group 0 is the producer: one thread issues
// every TMA copy (each consumer group's Q and dO tiles once, then K and V tiles of block_n keys into a ring
// of `stages` buffers); the other threads give their registers away and leave. Each other warp group
// consumes 64 query rows, per key tile:
//   S  = Q K^T, dP = dO V^T      wgmma, both operands from shared memory (K-major);
//   P  = exp2(S * scale * log2(e) - lse * log2(e)), masked;  dS = P (dP - D)   in registers;
//   dQ += dS K                   wgmma with dS from registers (packed to 16 bits, as the forward's P) and K,
//                                row-major in shared memory, read transposed (the forward's P V on V).
// dQ(j) is issued right after S(j + 1) and dP(j + 1), so the tensor cores run them back to back. Buffers are
// handed over by mbarriers: "full" ones the TMA completes, "empty" ones each consumer warp arrives on once
// its products have read the buffer (V after dP, K after dQ). dQ * scale leaves from registers. Every dQ
// element is one thread's fixed sequence of additions: the same bits on every run.
//
// kVarlen: the variable-length backward's dQ (docs/varlen.md), one block per (sequence, query head, block_m
// queries of max_seqlen_q): the block's batch is a sequence, its TMA coordinates start at the sequence's
// first rows of maps over the packed tensors (one batch of total rows). The key tile crossing the sequence's
// end reads the next sequence's K and V (or NaN where none owns them): those keys' dS is 0 by select and
// their K rows are set to 0 in shared memory before dS K reads them (0 * NaN = NaN). Query rows past the end
// only reach their own dQ rows, which are not stored. Without it none of that is compiled.
#include "flashrtc/backward_params.cuh"
#include "flashrtc/backward_tiles.cuh"
#include "flashrtc/block_ranges.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/mma.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/varlen_sequence.cuh"
#include "flashrtc/wgmma.cuh"
#include "flashrtc/wgmma_backward_dq_shape.cuh"

namespace flashrtc {

// The maps are rank 4 over [batch, seq, head, dim] tensors, innermost first: (dim, seq, head, batch). A box
// is one panel of rows: (panel elements, rows, 1, 1), rows = 64 for Q and dO, block_n for K and V.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kVarlen = false>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_backward_dq_wgmma(const __grid_constant__ typename kernel::BackwardParamsOf<kVarlen>::type args,
                                const __grid_constant__ TmaDescriptor q_map,
                                const __grid_constant__ TmaDescriptor k_map,
                                const __grid_constant__ TmaDescriptor v_map,
                                const __grid_constant__ TmaDescriptor do_map) {
  static_assert(sizeof(T) == 2, "the Hopper kernel takes 16-bit inputs");
  constexpr WgmmaBackwardDqShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the Hopper dQ kernel");
  constexpr int kConsumers = kShape.consumer_groups();
  constexpr int kPanelBytes = kShape.panel_bytes();
  constexpr int kPanelElements = kShape.panel_elements();
  constexpr int kPanels = kShape.panels();
  constexpr unsigned kQGroupBytes = kShape.q_group_bytes();
  constexpr unsigned kKVBytes = kShape.kv_tile_bytes();
  constexpr int kDTiles = kHeadDim / 8;  // 8-column tiles of dQ
  constexpr int kQKSteps = kHeadDim / 16;
  constexpr int kDSSteps = kBlockN / 16;
  constexpr bool kCausal = kMask != kernel::Mask::kNone;
  const kernel::BackwardParams& p = kernel::dense_params(args);

  extern __shared__ unsigned char smem_raw[];
  // Tiles: Q [group][panel][64 rows], dO likewise, K and V [stage][panel][block_n rows], then the barriers.
  const unsigned q_smem = (shared_address(smem_raw) + 1023u) & ~1023u;
  const unsigned do_smem = q_smem + kConsumers * kQGroupBytes;
  const unsigned k_smem = do_smem + kConsumers * kQGroupBytes;
  const unsigned v_smem = k_smem + kStages * kKVBytes;
  const unsigned barriers = v_smem + kStages * kKVBytes;
  const auto q_full = [&](int group) { return barriers + 8u * group; };
  const auto k_full = [&](int stage) { return barriers + 8u * (kConsumers + stage); };
  const auto v_full = [&](int stage) { return barriers + 8u * (kConsumers + kStages + stage); };
  const auto k_empty = [&](int stage) { return barriers + 8u * (kConsumers + 2 * kStages + stage); };
  const auto v_empty = [&](int stage) { return barriers + 8u * (kConsumers + 3 * kStages + stage); };
  constexpr unsigned kConsumerWarps = 4u * kConsumers;

  const int tid = threadIdx.x;
  // The warp group, read through a shuffle so that ptxas knows it is warp-uniform: what derives from it
  // (the group's Q and dO tiles) then stays in uniform registers with the wgmma descriptors, each stepped from its
  // tile's own by one add. On an H200, bf16, whole backward calls ran 1.5-7% faster with both
  // (docs/measurements/forward-hopper/uniform_group.md, the forward's finding).
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp = tid / 32;
  const int lane = tid % 32;

  const int m_linear = blockIdx.x % p.num_blocks;
  const int bh = blockIdx.x / p.num_blocks;
  const int head = bh % p.heads_q;
  const int batch = bh / p.heads_q;
  // Under a causal mask later query blocks see more keys: start them first so the tail of the grid is short.
  const int m_block = kCausal ? p.num_blocks - 1 - m_linear : m_linear;
  const long long m0 = static_cast<long long>(m_block) * kBlockM;
  const int kv_head = head / p.kv_group;
  VarlenSequence seq;  // the block's sequence (varlen only)
  if constexpr (kVarlen) {
    seq = varlen_sequence(args, batch);
    // Every thread alike, before any barrier: the grid covers max_seqlen_q rows of every sequence.
    if (m0 >= seq.seqlen_q) return;
  }
  // The lengths that bound the block's queries and keys (the call's, or its sequence's), and where its rows
  // lie in the maps (a packed call's sequence from its first rows of the one batch).
  const auto seqlen_q = [&] {
    if constexpr (kVarlen)
      return seq.seqlen_q;
    else
      return p.seqlen_q;
  };
  const auto seqlen_kv = [&] {
    if constexpr (kVarlen)
      return seq.seqlen_kv;
    else
      return p.seqlen_kv;
  };
  const auto first_q = [&] {
    if constexpr (kVarlen)
      return seq.first_q;
    else
      return 0;
  };
  const auto first_k = [&] {
    if constexpr (kVarlen)
      return seq.first_k;
    else
      return 0;
  };
  const int map_batch = kVarlen ? 0 : batch;
  const long long diag = mask_diag<kMask>(seqlen_q(), seqlen_kv());
  const int num_n_blocks = key_blocks_seen<kBlockN, kMask>(m0 + kBlockM, diag, seqlen_kv());

  if (tid == 0) {
    for (int g = 0; g < kConsumers; ++g) mbarrier_init(q_full(g), 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(k_full(s), 1);
      mbarrier_init(v_full(s), 1);
      mbarrier_init(k_empty(s), kConsumerWarps);
      mbarrier_init(v_empty(s), kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (group == 0) {
    registers_decrease_to<kShape.producer_registers()>();
    // Without keys nothing is loaded (the consumers write zeros), so no copy outlives the block.
    if (warp == 0 && num_n_blocks > 0 && elect_one_lane()) {
      tma_prefetch_descriptor(q_map);
      tma_prefetch_descriptor(do_map);
      tma_prefetch_descriptor(k_map);
      tma_prefetch_descriptor(v_map);
      for (int g = 0; g < kConsumers; ++g) {
        // The full boxes' bytes even where they hang past the end: TMA counts the zeros it fills in.
        mbarrier_arrive_expect_tx(q_full(g), 2u * kQGroupBytes);
        const int row = static_cast<int>(m0) + 64 * g + first_q();
#pragma unroll 1
        for (int panel = 0; panel < kPanels; ++panel) {
          const unsigned offset = g * kQGroupBytes + panel * 64u * kPanelBytes;
          tma_load_4d(q_smem + offset, q_map, q_full(g), panel * kPanelElements, row, head, map_batch);
          tma_load_4d(do_smem + offset, do_map, q_full(g), panel * kPanelElements, row, head, map_batch);
        }
      }
#pragma unroll 1
      for (int i = 0; i < num_n_blocks; ++i) {
        const int n0 = i * kBlockN + first_k();
        const int stage = i % kStages;
        const unsigned phase = (i / kStages) & 1;
        mbarrier_wait(k_empty(stage), phase ^ 1);
        mbarrier_arrive_expect_tx(k_full(stage), kKVBytes);
#pragma unroll 1
        for (int panel = 0; panel < kPanels; ++panel)
          tma_load_4d(k_smem + stage * kKVBytes + panel * unsigned(kBlockN) * kPanelBytes, k_map,
                      k_full(stage), panel * kPanelElements, n0, kv_head, map_batch);
        mbarrier_wait(v_empty(stage), phase ^ 1);
        mbarrier_arrive_expect_tx(v_full(stage), kKVBytes);
#pragma unroll 1
        for (int panel = 0; panel < kPanels; ++panel)
          tma_load_4d(v_smem + stage * kKVBytes + panel * unsigned(kBlockN) * kPanelBytes, v_map,
                      v_full(stage), panel * kPanelElements, n0, kv_head, map_batch);
      }
    }
    return;
  }

  registers_increase_to<kShape.consumer_registers()>();
  const int consumer = group - 1;
  const int warp_in_group = warp % 4;
  const unsigned q_tile = q_smem + consumer * kQGroupBytes;
  const unsigned do_tile = do_smem + consumer * kQGroupBytes;
  const long long group_m0 = m0 + 64 * consumer;
  const int row_local0 = 16 * warp_in_group + lane / 4;  // this lane's rows: +0 and +8, from group_m0

  // lse * log2(e) and D of this lane's two rows (row_stats: rows past the end and rows that saw no key get
  // lse_log2 = +inf, so their P is 0).
  float lse_row[2], d_row[2];
  {
    const long long row_base = [&] {  // where the head's lse and D rows start
      if constexpr (kVarlen)
        return static_cast<long long>(head) * args.total_q + seq.first_q;
      else
        return (static_cast<long long>(batch) * p.heads_q + head) * p.seqlen_q;
    }();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 stats =
          row_stats(p.lse + row_base, p.d_rows + row_base, group_m0 + row_local0 + 8 * h, seqlen_q());
      lse_row[h] = stats.x;
      d_row[h] = stats.y;
    }
  }

  float acc_dq[kHeadDim / 2];
  float acc_s[kBlockN / 2];
  float acc_dp[kBlockN / 2];
  unsigned ds_frag[kDSSteps][4];

  // S = Q K^T and dP = dO V^T for the tiles in `stage`, issued and committed as one group (not waited for).
  const auto issue_s_dp = [&](int stage) {
    const unsigned k_tile = k_smem + stage * kKVBytes;
    const unsigned v_tile = v_smem + stage * kKVBytes;
    const auto desc = [](unsigned tile) { return make_smem_descriptor<kPanelBytes>(tile, 16, 8 * kPanelBytes); };
    const unsigned long long q_desc = desc(q_tile), k_desc = desc(k_tile), do_desc = desc(do_tile),
                             v_desc = desc(v_tile);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kQKSteps; ++step) {
      const unsigned panel = (step * 16) / kPanelElements;
      const unsigned inside = (step * 16) % kPanelElements * 2;  // bytes into the panel's rows
      const unsigned a_offset = panel * 64u * kPanelBytes + inside;
      const unsigned b_offset = panel * unsigned(kBlockN) * kPanelBytes + inside;
      Wgmma<T, kBlockN>::template ss<0>(acc_s, advance_descriptor(q_desc, a_offset),
                                        advance_descriptor(k_desc, b_offset), step > 0);
    }
#pragma unroll
    for (int step = 0; step < kQKSteps; ++step) {
      const unsigned panel = (step * 16) / kPanelElements;
      const unsigned inside = (step * 16) % kPanelElements * 2;
      const unsigned a_offset = panel * 64u * kPanelBytes + inside;
      const unsigned b_offset = panel * unsigned(kBlockN) * kPanelBytes + inside;
      Wgmma<T, kBlockN>::template ss<0>(acc_dp, advance_descriptor(do_desc, a_offset),
                                        advance_descriptor(v_desc, b_offset), step > 0);
    }
    wgmma_commit();
  };
  // dQ += dS K for the K tile in `stage`: K is the MN-major B operand (head dim contiguous), panels of the
  // head dim block_n rows apart, 16 keys per step (the forward's P V descriptor). The first key tile writes
  // dQ instead of adding to it: zeroing the accumulators by ordinary instructions made ptxas serialize the
  // overlapped products (C7515).
  const auto issue_dq = [&](int stage, bool accumulate) {
    const unsigned k_tile = k_smem + stage * kKVBytes;
    const unsigned long long k_desc =
        make_smem_descriptor<kPanelBytes>(k_tile, unsigned(kBlockN) * kPanelBytes, 8 * kPanelBytes);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kDSSteps; ++step) {
      const unsigned long long b = advance_descriptor(k_desc, step * 16u * kPanelBytes);
      Wgmma<T, kHeadDim>::template rs<1>(acc_dq, ds_frag[step], b, accumulate || step > 0);
    }
    wgmma_commit();
  };
  // Each consumer warp arrives once it no longer reads the buffer.
  const auto release = [&](unsigned bar) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(bar);
  };
  // dS = P (dP - D) of the key tile at n0, packed to dS K's A fragments. Accumulator register i of a lane is
  // row row_local0 + 8 * ((i / 2) % 2), key n0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2 (wgmma.cuh).
  const KeyMask<kMask> mask{seqlen_kv(), diag};
  const auto make_ds = [&](long long n0) {
    const bool needs_mask = mask.tile_needs_mask(group_m0, n0, kBlockN);
    const auto local = mask.local(group_m0, n0);
    // Written straight into the fragments: S and dP stay untouched until the next product overwrites them.
#pragma unroll
    for (int step = 0; step < kDSSteps; ++step)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float ds[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 8 * step + 2 * r + e;
          const int h = (i / 2) % 2;
          const float prob = fast_exp2(acc_s[i] * p.scale_log2 - lse_row[h]);
          const int key_local = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
          const bool hidden = needs_mask && local.hides(row_local0 + 8 * h, key_local);
          // Varlen: a hidden key's dP may be the next sequence's V times dO, NaN: dS 0 by select.
          if constexpr (kVarlen)
            ds[e] = hidden ? 0.f : prob * (acc_dp[i] - d_row[h]);
          else
            ds[e] = (hidden ? 0.f : prob) * (acc_dp[i] - d_row[h]);
        }
        ds_frag[step][r] = pack2<T>(ds[0], ds[1]);
      }
  };

  // Varlen: the rows of the K tile of key tile i in `stage` past the sequence's keys, 0 before dS K reads
  // them (their dS is 0, but 0 * NaN would not be). Both groups write the same zeros, each before its own
  // products (the stage goes back to the producer only after both); keys_left is the same for the whole
  // group.
  const auto clear_k_past_end = [&](int i, int stage) {
    if constexpr (kVarlen) {
      const int keys_left = seqlen_kv() - i * kBlockN;
      if (keys_left < kBlockN) {
        clear_panel_rows<kBlockN, kPanels, kPanelBytes>(k_smem + stage * kKVBytes, keys_left, tid % 128);
        fence_async_shared();
        named_barrier_sync(1 + consumer, 128);
      }
    }
  };
  if (num_n_blocks > 0) {
    const auto stage_of = [](int i) { return i % kStages; };
    const auto phase_of = [](int i) { return unsigned(i / kStages) & 1u; };
    mbarrier_wait(q_full(consumer), 0);
    mbarrier_wait(k_full(0), 0);
    mbarrier_wait(v_full(0), 0);
    clear_k_past_end(0, 0);
    issue_s_dp(0);
#pragma unroll 1
    for (int i = 0; i < num_n_blocks; ++i) {
      const int stage = stage_of(i);
      wgmma_wait<0>();  // S(i), dP(i) and dQ(i - 1) are done
      wgmma_hold(acc_s);
      wgmma_hold(acc_dp);
      wgmma_hold(acc_dq);
      wgmma_hold(ds_frag);
      release(v_empty(stage));
      if (i > 0) release(k_empty(stage_of(i - 1)));
      make_ds(static_cast<long long>(i) * kBlockN);
      if (i + 1 < num_n_blocks) {
        mbarrier_wait(k_full(stage_of(i + 1)), phase_of(i + 1));
        mbarrier_wait(v_full(stage_of(i + 1)), phase_of(i + 1));
        clear_k_past_end(i + 1, stage_of(i + 1));
        issue_s_dp(stage_of(i + 1));
      }
      issue_dq(stage, i > 0);
    }
    wgmma_wait<0>();
    wgmma_hold(acc_dq);
    wgmma_hold(ds_frag);
    release(k_empty(stage_of(num_n_blocks - 1)));
  } else {
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) acc_dq[i] = 0.f;
  }

  // Epilogue: dQ * scale from registers; every row of the block before seqlen_q is written (zeros where a
  // row saw no key).
  // Varlen: per thread, so no store crosses into the next sequence's rows.
  T* dq_ptr = static_cast<T*>(p.d_q) + batch * p.dq_stride_batch + head * p.dq_stride_head;
  if constexpr (kVarlen) dq_ptr += seq.first_q * p.dq_stride_seq;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = group_m0 + row_local0 + 8 * h;
    if (row >= seqlen_q()) continue;
#pragma unroll
    for (int t = 0; t < kDTiles; ++t) {
      const int col = 8 * t + 2 * (lane % 4);
      *reinterpret_cast<unsigned*>(dq_ptr + row * p.dq_stride_seq + col) =
          pack2<T>(acc_dq[4 * t + 2 * h] * p.scale, acc_dq[4 * t + 2 * h + 1] * p.scale);
    }
  }
}

}  // namespace flashrtc

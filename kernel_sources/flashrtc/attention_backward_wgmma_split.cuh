#pragma once
// Backward attention's main kernel for Hopper (sm_90a) at head dim 256, fp16 / bf16 with fp32 accumulation:
// dK, dV, and dQ added into the fp32 workspace, in one kernel (Operation::kBackwardFused).
//
// dK and dV of 64 keys x 256 columns are 256 accumulators per thread of a warp group, more than it has, so
// where attention_backward_wgmma.cuh gives each consumer group keys of its own, here the two consumer groups
// share the block's 64 keys and split each pair (query head, 64 queries) between them: group g forms S^T and
// dP^T for the keys and its 32 queries, then takes columns [128g, 128g + 128) of the gradients:
//   S^T  = K Q_g^T, dP^T = V dO_g^T        wgmma, both operands K-major from shared memory;
//   P^T, dS^T as the other kernel         written to shared memory (keys as rows, and dS^T transposed as dS
//                                         with queries as rows), one barrier across both groups;
//   dV[:, g] += P^T dO[:, g]              wgmma, A (all 64 queries) and B from shared memory;
//   dK[:, g] += dS^T Q[:, g];
//   dQ[:, g]  = dS K[:, g]                in two chunks of 64 columns, each stored, scaled, into the group's
//                                         fp32 chunk in the workspace's order (dq_accum_layout.cuh), which one
//                                         thread of the producer group adds into the workspace by a bulk
//                                         reduce-add (cp.reduce.async.bulk) and frees once read.
// Q takes `stages` buffers and dO one (the shared memory left), freed as soon as dV has read it. dK and dV stay
// in registers across the block's pairs, so their sum over the kv head's query heads needs no atomics.
#include "flashrtc/backward_key_block.cuh"
#include "flashrtc/backward_params.cuh"
#include "flashrtc/backward_tiles.cuh"
#include "flashrtc/dq_accum_layout.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/mma.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/wgmma.cuh"
#include "flashrtc/wgmma_backward_split_shape.cuh"

namespace flashrtc {

// acc (+)= A B: A the 64 x 64 16-bit tile at a_tile (K-major, 128-byte rows), B kColumns columns from 128-byte
// panel `panel` of the tile at b_tile of `rows` rows (MN-major: head dim contiguous), 16 rows of B per step.
template <typename T, int kColumns>
__device__ __forceinline__ void split_backward_product(float (&acc)[kColumns / 2], unsigned a_tile, unsigned b_tile,
                                                       unsigned rows, unsigned panel, bool accumulate) {
  const unsigned long long a_desc = make_smem_descriptor<128>(a_tile, 16, 8 * 128);
  const unsigned long long b_desc = make_smem_descriptor<128>(b_tile + panel * rows * 128u, rows * 128u, 8 * 128);
#pragma unroll
  for (int step = 0; step < 64 / 16; ++step)
    Wgmma<T, kColumns>::template ss<1>(acc, advance_descriptor(a_desc, step * 32u),
                                       advance_descriptor(b_desc, step * 16u * 128u), accumulate || step > 0);
}

// The maps are rank 4 over [batch, seq, head, dim] tensors, innermost first: (dim, seq, head, batch); a box is
// one panel of block_m (Q, dO) or block_n (K, V) rows.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_backward_wgmma_split(const __grid_constant__ kernel::BackwardParams p,
                                   const __grid_constant__ TmaDescriptor q_map,
                                   const __grid_constant__ TmaDescriptor k_map,
                                   const __grid_constant__ TmaDescriptor v_map,
                                   const __grid_constant__ TmaDescriptor do_map) {
  static_assert(sizeof(T) == 2, "the Hopper kernel takes 16-bit inputs");
  constexpr WgmmaBackwardSplitShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the Hopper head-dim-256 backward kernel");
  constexpr int kPanelBytes = kShape.panel_bytes();
  static_assert(kPanelBytes == 128, "64-element panels: a group's columns are whole panels");
  constexpr int kPanelElements = kShape.panel_elements();
  constexpr int kPanels = kShape.panels();
  constexpr unsigned kKVBytes = kShape.kv_tile_bytes();
  constexpr unsigned kQBytes = kShape.q_tile_bytes();
  constexpr int kGroupQueries = kShape.group_queries();
  constexpr int kGroupColumns = kShape.group_columns();
  constexpr int kChunkColumns = kShape.dq_chunk_columns();
  constexpr int kChunks = kShape.dq_chunks();
  constexpr unsigned kChunkBytes = kShape.dq_chunk_bytes();
  constexpr int kSTiles = kGroupQueries / 8;  // 8-query tiles of the group's S^T and dP^T
  constexpr int kSSteps = kGroupQueries / 16;  // their 16-query steps, as A fragments
  using Block = BackwardKeyBlock<kBlockM, kBlockN, kMask>;

  extern __shared__ unsigned char smem_raw[];
  // K, V [panel][64 rows]; Q [stage][panel][64 rows]; dO [panel][64 rows]; P^T, dS^T [64 keys][64 queries];
  // dS [64 queries][64 keys]; dQ [group][chunk]; statistics [group][2][lse | D]; barriers.
  const unsigned raw = shared_address(smem_raw);
  const unsigned k_smem = (raw + 1023u) & ~1023u;
  const unsigned v_smem = k_smem + kKVBytes;
  const unsigned q_smem = v_smem + kKVBytes;
  const unsigned do_smem = q_smem + kStages * kQBytes;
  const unsigned pt_smem = do_smem + kQBytes;
  const unsigned dst_smem = pt_smem + kShape.operand_tile_bytes();
  const unsigned ds_smem = dst_smem + kShape.operand_tile_bytes();
  const unsigned dq_smem = ds_smem + kShape.operand_tile_bytes();
  const unsigned stats_smem = dq_smem + 2u * kChunkBytes;
  const unsigned barriers = stats_smem + kShape.stats_buffers() * kShape.stats_bytes();
  const unsigned kv_full = barriers;
  const auto q_full = [&](int stage) { return barriers + 8u * (1 + stage); };
  const auto q_empty = [&](int stage) { return barriers + 8u * (1 + kStages + stage); };
  const unsigned do_full = barriers + 8u * (1 + 2 * kStages);
  const unsigned do_empty = do_full + 8u;
  const auto dq_full = [&](int group) { return do_empty + 8u * (1 + group); };
  const auto dq_empty = [&](int group) { return do_empty + 8u * (3 + group); };
  const auto stats = [&](int buffer) {  // lse_log2[group queries], then D[group queries]
    return reinterpret_cast<float*>(smem_raw + (stats_smem - raw) + buffer * kShape.stats_bytes());
  };
  constexpr unsigned kConsumerWarps = 8;
  // Named barriers (0 is __syncthreads): 1 + g, group g's statistics; both groups' operand tiles written, and
  // read by the previous pair's products.
  constexpr int kTilesWritten = 3;
  constexpr int kTilesRead = 4;

  const int tid = threadIdx.x;
  // Warp-uniform through a shuffle, so that what derives from it stays in uniform registers.
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp = tid / 32;
  const int lane = tid % 32;

  if (tid == 0) {
    mbarrier_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(q_full(s), 1);
      mbarrier_init(q_empty(s), kConsumerWarps);
    }
    mbarrier_init(do_full, 1);
    mbarrier_init(do_empty, kConsumerWarps);
    for (int g = 0; g < 2; ++g) {
      mbarrier_init(dq_full(g), 4);  // the group's warps
      mbarrier_init(dq_empty(g), 1);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (group == 0) {
    registers_decrease_to<kShape.producer_registers()>();
    const Block block(p);
    if (block.total == 0) return;
    if (warp == 0 && elect_one_lane()) {
      tma_prefetch_descriptor(q_map);
      tma_prefetch_descriptor(do_map);
      mbarrier_arrive_expect_tx(kv_full, 2 * kKVBytes);
#pragma unroll 1
      for (int panel = 0; panel < kPanels; ++panel) {
        const unsigned offset = panel * unsigned(kBlockN) * kPanelBytes;
        tma_load_4d(k_smem + offset, k_map, kv_full, panel * kPanelElements, block.n0, block.kv_head,
                    block.batch);
        tma_load_4d(v_smem + offset, v_map, kv_full, panel * kPanelElements, block.n0, block.kv_head,
                    block.batch);
      }
      int pair = 0;
      block.template for_each_pair<kStages>(p, [&](int head, int m0, int stage, unsigned phase) {
        mbarrier_wait(q_empty(stage), phase ^ 1);
        mbarrier_arrive_expect_tx(q_full(stage), kQBytes);
#pragma unroll 1
        for (int panel = 0; panel < kPanels; ++panel)
          tma_load_4d(q_smem + stage * kQBytes + panel * unsigned(kBlockM) * kPanelBytes, q_map, q_full(stage),
                      panel * kPanelElements, m0, head, block.batch);
        mbarrier_wait(do_empty, (pair & 1) ^ 1);
        mbarrier_arrive_expect_tx(do_full, kQBytes);
#pragma unroll 1
        for (int panel = 0; panel < kPanels; ++panel)
          tma_load_4d(do_smem + panel * unsigned(kBlockM) * kPanelBytes, do_map, do_full,
                      panel * kPanelElements, m0, head, block.batch);
        ++pair;
      });
    }
    if (warp == 1 && elect_one_lane()) {
      // Chunk c of group g holds columns [128g + 64c, + 64): one contiguous run of the workspace's tile.
      const long long tiles = (p.seqlen_q + kBlockM - 1) / kBlockM;
      int pair = 0;
      block.template for_each_pair<kStages>(p, [&](int head, int m0, int, unsigned) {
        const long long tile = (static_cast<long long>(block.batch) * p.heads_q + head) * tiles + m0 / kBlockM;
        float* const tile_base = p.dq_accum + tile * (kBlockM * kHeadDim);
#pragma unroll 1
        for (int chunk = 0; chunk < kChunks; ++chunk)
#pragma unroll 1
          for (int g = 0; g < 2; ++g) {
            mbarrier_wait(dq_full(g), (kChunks * pair + chunk) & 1);
            const int column0 = g * kGroupColumns + chunk * kChunkColumns;
            bulk_reduce_add_f32(tile_base + dq_tile_fragment_offset(0, column0 / 4, 0, kHeadDim),
                                dq_smem + g * kChunkBytes, kChunkBytes);
            tma_store_commit();
            tma_store_wait_read<0>();
            mbarrier_arrive(dq_empty(g));
          }
        ++pair;
      });
      bulk_wait_all();
    }
    return;
  }

  registers_increase_to<kShape.consumer_registers()>();
  const int consumer = group - 1;
  const int warp_in_group = warp % 4;
  const int group_tid = tid % 128;
  // This group's queries of a pair and columns of the gradients.
  const int query0 = consumer * kGroupQueries;
  const int column0 = consumer * kGroupColumns;
  // This lane's keys relative to n0: key_row and key_row + 8.
  const int key_row = 16 * warp_in_group + lane / 4;

  float acc_dk[kGroupColumns / 2];
  float acc_dv[kGroupColumns / 2];
#pragma unroll
  for (int i = 0; i < kGroupColumns / 2; ++i) acc_dk[i] = 0.f, acc_dv[i] = 0.f;

  // acc = A (64 keys x head dim) times the group's queries of B (queries x head dim) transposed, both K-major.
  const auto issue_scores = [&](float(&acc)[kGroupQueries / 2], unsigned a_tile, unsigned b_tile) {
    const unsigned long long a_desc = make_smem_descriptor<kPanelBytes>(a_tile, 16, 8 * kPanelBytes);
    const unsigned long long b_desc =
        make_smem_descriptor<kPanelBytes>(b_tile + query0 * unsigned(kPanelBytes), 16, 8 * kPanelBytes);
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step) {
      const unsigned panel = (step * 16) / kPanelElements;
      const unsigned inside = (step * 16) % kPanelElements * 2;
      const unsigned long long a = advance_descriptor(a_desc, panel * unsigned(kBlockN) * kPanelBytes + inside);
      const unsigned long long b = advance_descriptor(b_desc, panel * unsigned(kBlockM) * kPanelBytes + inside);
      Wgmma<T, kGroupQueries>::template ss<0>(acc, a, b, step > 0);
    }
  };
  const Block block(p);
  if (block.total > 0) mbarrier_wait(kv_full, 0);
  const KeyMask<kMask> mask{p.seqlen_kv, block.diag};
  const int n0 = block.n0;
  // The group's queries' lse (log2 domain) and D, one pair ahead, as the other kernel's consumers.
  float2 next_stats{0.f, 0.f};
  const auto fetch_stats = [&](int head, int m0) {
    const long long row_base = (static_cast<long long>(block.batch) * p.heads_q + head) * p.seqlen_q;
    if (group_tid < kGroupQueries)
      next_stats = row_stats(p.lse + row_base, p.d_rows + row_base, m0 + query0 + group_tid, p.seqlen_q);
  };
  if (block.total > 0) fetch_stats(block.kv_head * p.kv_group, block.m_begin * kBlockM);
  int pairs = 0;
  block.template for_each_pair<kStages>(p, [&](int head, int m0, int stage, unsigned phase) {
    const int pair = pairs;
    const unsigned q_tile = q_smem + stage * kQBytes;
    mbarrier_wait(q_full(stage), phase);
    mbarrier_wait(do_full, pair & 1);

    float acc_s[kGroupQueries / 2];
    float acc_dp[kGroupQueries / 2];
    wgmma_fence();
    issue_scores(acc_s, k_smem, q_tile);
    wgmma_commit();
    issue_scores(acc_dp, v_smem, do_smem);
    wgmma_commit();

    float* const lse_log2 = stats(2 * consumer + (pair & 1));
    const float* const d_rows = lse_log2 + kGroupQueries;
    if (group_tid < kGroupQueries)
      lse_log2[group_tid] = next_stats.x, lse_log2[kGroupQueries + group_tid] = next_stats.y;
    named_barrier_sync(1 + consumer, 128);
    if (++pairs < block.total) {
      const bool next_head = m0 + kBlockM >= block.num_m_blocks * kBlockM;
      fetch_stats(next_head ? head + 1 : head, next_head ? block.m_begin * kBlockM : m0 + kBlockM);
    }
    wgmma_wait<1>();
    wgmma_hold(acc_s);

    // P^T. Register 4t + 2h + e holds key key_row + 8h, query m0 + query0 + 8t + 2 * (lane % 4) + e.
    {
      const bool needs_mask = mask.tile_needs_mask(m0, n0, kBlockN);
      const auto local = mask.local(m0, n0);
#pragma unroll
      for (int t = 0; t < kSTiles; ++t) {
        const int q_group = 8 * t + 2 * (lane % 4);
        const float2 lse2 = *reinterpret_cast<const float2*>(lse_log2 + q_group);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& s = acc_s[4 * t + 2 * h + e];
            const float prob = fast_exp2(s * p.scale_log2 - (e ? lse2.y : lse2.x));
            s = needs_mask && local.hides(query0 + q_group + e, key_row + 8 * h) ? 0.f : prob;
          }
      }
    }
    wgmma_wait<0>();
    wgmma_hold(acc_dp);
    // dS^T = P^T (dP^T - D) in dP^T's place.
#pragma unroll
    for (int t = 0; t < kSTiles; ++t) {
      const float2 d2 = *reinterpret_cast<const float2*>(d_rows + 8 * t + 2 * (lane % 4));
#pragma unroll
      for (int i = 0; i < 4; ++i)
        acc_dp[4 * t + i] = acc_s[4 * t + i] * (acc_dp[4 * t + i] - (i % 2 ? d2.y : d2.x));
    }
    unsigned p_frag[kSSteps][4];
    unsigned ds_frag[kSSteps][4];
    pack_a_fragments<T>(acc_s, p_frag);
    pack_a_fragments<T>(acc_dp, ds_frag);

    // The operand tiles: matrix j of a step holds keys + 8 * (j % 2) and queries 16 * step + 8 * (j / 2) of
    // the group's; lane 8j + i addresses key row i (P^T, dS^T) or, transposed, query row i (dS). Both groups'
    // products of the previous pair must have read them first.
    if (pair > 0) named_barrier_sync(kTilesRead, 256);
    {
      const int j = lane / 8;
      const int key = 16 * warp_in_group + 8 * (j % 2);
#pragma unroll
      for (int step = 0; step < kSSteps; ++step) {
        const int query = query0 + 16 * step + 8 * (j / 2);
        const unsigned row_offset = SwizzledPanel<128>::offset(key + lane % 8, 2 * query);
        stmatrix_x4(pt_smem + row_offset, p_frag[step]);
        stmatrix_x4(dst_smem + row_offset, ds_frag[step]);
        stmatrix_x4_trans(ds_smem + SwizzledPanel<128>::offset(query + lane % 8, 2 * key), ds_frag[step]);
      }
    }
    fence_async_shared();
    named_barrier_sync(kTilesWritten, 256);

    // dV, dK, then dQ's chunks, committed one by one so that each input is freed as soon as it has been read.
    float acc_dq[kChunks][kChunkColumns / 2];
    wgmma_fence();
    const unsigned panel0 = column0 / kPanelElements;
    split_backward_product<T, kGroupColumns>(acc_dv, pt_smem, do_smem, kBlockM, panel0, true);
    wgmma_commit();
    split_backward_product<T, kGroupColumns>(acc_dk, dst_smem, q_tile, kBlockM, panel0, true);
    wgmma_commit();
#pragma unroll
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      split_backward_product<T, kChunkColumns>(acc_dq[chunk], ds_smem, k_smem, kBlockN,
                                               panel0 + chunk * kChunkColumns / kPanelElements, false);
      wgmma_commit();
    }
    static_assert(kChunks == 2, "the waits below count two dQ chunks");
    wgmma_wait<3>();
    wgmma_hold(acc_dv);
    __syncwarp();
    if (lane == 0) mbarrier_arrive(do_empty);
    wgmma_wait<2>();
    wgmma_hold(acc_dk);
    __syncwarp();
    if (lane == 0) mbarrier_arrive(q_empty(stage));

    float* const dq_chunk = reinterpret_cast<float*>(smem_raw + (dq_smem - raw) + consumer * kChunkBytes);
#pragma unroll
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      if (chunk == 0) {
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
      wgmma_hold(acc_dq[chunk]);
      // The group's previous chunk has been read by its bulk reduce-add.
      const int chunks_before = kChunks * pair + chunk;
      mbarrier_wait(dq_empty(consumer), (chunks_before & 1) ^ 1);
#pragma unroll
      for (int t = 0; t < kChunkColumns / 8; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(dq_chunk + dq_tile_fragment_offset(0, 2 * t + h, group_tid, kChunkColumns)) =
              make_float2(acc_dq[chunk][4 * t + 2 * h] * p.scale, acc_dq[chunk][4 * t + 2 * h + 1] * p.scale);
      fence_async_shared();
      __syncwarp();
      if (lane == 0) mbarrier_arrive(dq_full(consumer));
    }
  });

  // dK (times the softmax scale) and dV of this lane's keys and the group's columns; keys past the end are not
  // stored.
  T* dk_ptr = static_cast<T*>(p.d_k) + block.batch * p.dk_stride_batch + block.kv_head * p.dk_stride_head;
  T* dv_ptr = static_cast<T*>(p.d_v) + block.batch * p.dv_stride_batch + block.kv_head * p.dv_stride_head;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long key = static_cast<long long>(n0) + key_row + 8 * h;
    if (key >= p.seqlen_kv) continue;
#pragma unroll
    for (int t = 0; t < kGroupColumns / 8; ++t) {
      const int col = column0 + 8 * t + 2 * (lane % 4);
      *reinterpret_cast<unsigned*>(dk_ptr + key * p.dk_stride_seq + col) =
          pack2<T>(acc_dk[4 * t + 2 * h] * p.scale, acc_dk[4 * t + 2 * h + 1] * p.scale);
      *reinterpret_cast<unsigned*>(dv_ptr + key * p.dv_stride_seq + col) =
          pack2<T>(acc_dv[4 * t + 2 * h], acc_dv[4 * t + 2 * h + 1]);
    }
  }
}

}  // namespace flashrtc

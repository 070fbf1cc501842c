#pragma once
// Backward attention's main kernels for Hopper (sm_90a), fp16 / bf16 with fp32 accumulation: dK and dV by
// TMA, wgmma and warp specialization; attention_backward_wgmma leaves dQ to the separate pass
// (Operation::kBackwardDq), attention_backward_wgmma_fused adds it into the fp32 workspace itself.
//
// One thread block owns block_n keys of one (batch, kv head), 64 per consumer warp group, and visits every
// (query head of the kv head's group, query block) pair that sees any of its keys, in the order of the mma
// kernel (attention_backward_mma.cuh). Warp group 0 produces: one thread loads K and V once, then Q and dO
// of each pair by TMA into a ring of `stages` buffers. Each consumer warp group reads the pairs' lse (log2
// domain) and D into shared memory of its own, one pair ahead, and, for its 64 keys:
//   S^T  = K Q^T      wgmma, K and Q from shared memory (both K-major);
//   dP^T = V dO^T     wgmma, likewise, committed with S^T;
//   P^T  = exp2(S^T * scale * log2(e) - lse * log2(e)), masked as the forward;  dS^T = P^T (dP^T - D);
//   dV  += P^T dO     wgmma with P^T from registers (S^T's accumulators packed to 16 bits are A fragments)
//                     and dO, row-major in shared memory, read transposed (the MN-major B operand);
//   dK  += dS^T Q     likewise.
// dK and dV stay in registers across the whole group, so the sum over its query heads needs no atomics; each
// consumer warp arrives on the stage's "empty" barrier once its products have read Q and dO.
//
// The fused kernel also forms dQ = dS K per pair, the fifth product: every group stores its dS^T slice
// transposed (stmatrix) as 64 keys of the K-major dS tile; one group in turn waits for all of them at a named
// barrier, multiplies (wgmma, dS and K from shared memory) and stores dQ, scaled, into one of two fp32 tiles
// in the workspace's order (dq_accum_layout.cuh). One thread of the producer group then adds that tile into
// the workspace with one bulk reduce-add (cp.reduce.async.bulk) and frees it once read: dQ's sum over key
// blocks runs on the copy engine, out of the consumers' way, in no fixed order (the deterministic mode takes
// the separate pass).
//
// kVarlen: the variable-length backward (docs/varlen.md), one block per
// (sequence, kv head, block_n keys of max_seqlen_k): the block's batch is a sequence
// (VarlenBackwardKeyBlock), its TMA coordinates start at the sequence's first rows of maps over the packed
// tensors (one batch of total rows). Boxes crossing the sequence's end read the next sequence's rows (or NaN
// where none owns them): K and V rows past the sequence's keys, Q and dO rows past its queries are set to 0 in
// shared memory before the products (keys past the end are masked, P = 0 by select, and rows past the end
// have lse +inf, so P = 0; with the zeros, dP and dS are 0 there too, where 0 * NaN would not be). The fused
// kernel adds each sequence's dQ into tiles of its own (varlen_dq_first_tile). Without kVarlen none of that
// is compiled.
#include "flashrtc/backward_key_block.cuh"
#include "flashrtc/backward_params.cuh"
#include "flashrtc/backward_tiles.cuh"
#include "flashrtc/block_ranges.cuh"
#include "flashrtc/dq_accum_layout.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/mma.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/sm90_async.cuh"
#include "flashrtc/varlen_sequence.cuh"
#include "flashrtc/wgmma.cuh"
#include "flashrtc/wgmma_backward_shape.cuh"

namespace flashrtc {

// The maps are rank 4 over [batch, seq, head, dim] tensors, innermost first: (dim, seq, head, batch). A box
// is one panel of rows: (panel elements, rows, 1, 1), rows = block_m for Q and dO, block_n for K and V.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kFused, bool kVarlen = false>
__device__ __forceinline__ void backward_wgmma_block(
    const typename kernel::BackwardParamsOf<kVarlen>::type& args, const TmaDescriptor& q_map,
    const TmaDescriptor& k_map, const TmaDescriptor& v_map, const TmaDescriptor& do_map) {
  static_assert(sizeof(T) == 2, "the Hopper kernel takes 16-bit inputs");
  const kernel::BackwardParams& p = kernel::dense_params(args);
  constexpr WgmmaBackwardShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages, kFused};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the Hopper backward kernel");
  constexpr int kConsumers = kShape.consumer_groups();
  constexpr int kPanelBytes = kShape.panel_bytes();
  constexpr int kPanelElements = kShape.panel_elements();
  constexpr int kPanels = kShape.panels();
  constexpr unsigned kKVBytes = kShape.kv_tile_bytes();
  constexpr unsigned kQBytes = kShape.q_tile_bytes();
  constexpr int kSTiles = kBlockM / 8;    // 8-query tiles of S^T and dP^T
  constexpr int kDTiles = kHeadDim / 8;   // 8-column tiles of dK and dV
  constexpr int kDSteps = kHeadDim / 16;  // k-steps of S^T and dP^T
  constexpr int kQSteps = kBlockM / 16;   // k-steps of dV and dK
  using Block = typename BackwardKeyBlockOf<kVarlen, kBlockM, kBlockN, kMask>::type;
  constexpr bool kOverlapDv = kShape.overlap_dv();
  constexpr int kKeySteps = kBlockN / 16;  // k-steps of dQ

  extern __shared__ unsigned char smem_raw[];
  // K, V [panel][block_n rows]; Q, dO [stage][panel][block_m rows]; (fused) dS [key panel][block_m rows] and
  // dQ [2][block_m x head_dim] fp32; statistics [stage][lse | D]; barriers.
  const unsigned raw = shared_address(smem_raw);
  const unsigned k_smem = (raw + 1023u) & ~1023u;
  const unsigned v_smem = k_smem + kKVBytes;
  const unsigned q_smem = v_smem + kKVBytes;
  const unsigned do_smem = q_smem + kStages * kQBytes;
  const unsigned ds_smem = do_smem + kStages * kQBytes;
  const unsigned dq_smem = ds_smem + kShape.ds_tile_bytes();
  const unsigned stats_smem = do_smem + kStages * kQBytes + kShape.dq_bytes();
  const unsigned barriers = stats_smem + kShape.stats_buffers() * kShape.stats_bytes();
  const unsigned kv_full = barriers;
  const auto q_full = [&](int stage) { return barriers + 8u * (1 + stage); };
  const auto q_empty = [&](int stage) { return barriers + 8u * (1 + kStages + stage); };
  const auto dq_full = [&](int buffer) { return barriers + 8u * (1 + 2 * kStages + buffer); };
  const auto dq_empty = [&](int buffer) { return barriers + 8u * (3 + 2 * kStages + buffer); };
  const auto stats = [&](int buffer) {  // lse_log2[block_m], then D[block_m]
    return reinterpret_cast<float*>(smem_raw + (stats_smem - raw) + buffer * kShape.stats_bytes());
  };
  constexpr unsigned kConsumerWarps = 4u * kConsumers;

  const int tid = threadIdx.x;
  // The warp group, read through a shuffle so that ptxas knows it is warp-uniform: what derives from it
  // (the group's slice of K and V) then stays in uniform registers with the wgmma descriptors, each stepped from its
  // tile's own by one add. On an H200, bf16, whole backward calls ran 1.5-7% faster with both
  // (docs/measurements/forward-hopper/uniform_group.md, the forward's finding).
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp = tid / 32;
  const int lane = tid % 32;
  // Every thread alike, before any barrier: a block past its sequence's keys has nothing to write.
  if constexpr (kVarlen)
    if (!Block(args).live) return;
  // Where a block's rows lie in the maps: a packed call's sequence from its first rows of the one batch.
  const auto q_row = [](const Block& b, int m0) {
    if constexpr (kVarlen)
      return m0 + b.seq.first_q;
    else
      return m0;
  };
  const auto k_row = [](const Block& b) {
    if constexpr (kVarlen)
      return b.n0 + b.seq.first_k;
    else
      return b.n0;
  };
  const auto map_batch = [](const Block& b) { return kVarlen ? 0 : b.batch; };

  if (tid == 0) {
    mbarrier_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(q_full(s), 1);
      mbarrier_init(q_empty(s), kConsumerWarps);
    }
    if constexpr (kFused) {
      for (int b = 0; b < 2; ++b) {
        mbarrier_init(dq_full(b), 4);  // the warps of the pair's dQ group
        mbarrier_init(dq_empty(b), 1);
      }
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (group == 0) {
    registers_decrease_to<kShape.producer_registers()>();
    const Block block(args);
    if (block.total == 0) return;
    if (warp == 0 && elect_one_lane()) {
      tma_prefetch_descriptor(q_map);
      tma_prefetch_descriptor(do_map);
      mbarrier_arrive_expect_tx(kv_full, 2 * kKVBytes);
#pragma unroll 1
      for (int panel = 0; panel < kPanels; ++panel) {
        const unsigned offset = panel * unsigned(kBlockN) * kPanelBytes;
        tma_load_4d(k_smem + offset, k_map, kv_full, panel * kPanelElements, k_row(block), block.kv_head,
                    map_batch(block));
        tma_load_4d(v_smem + offset, v_map, kv_full, panel * kPanelElements, k_row(block), block.kv_head,
                    map_batch(block));
      }
      block.template for_each_pair<kStages>(p, [&](int head, int m0, int stage, unsigned phase) {
        mbarrier_wait(q_empty(stage), phase ^ 1);
        mbarrier_arrive_expect_tx(q_full(stage), 2 * kQBytes);
#pragma unroll 1
        for (int panel = 0; panel < kPanels; ++panel) {
          const unsigned offset = stage * kQBytes + panel * unsigned(kBlockM) * kPanelBytes;
          tma_load_4d(q_smem + offset, q_map, q_full(stage), panel * kPanelElements, q_row(block, m0), head,
                      map_batch(block));
          tma_load_4d(do_smem + offset, do_map, q_full(stage), panel * kPanelElements, q_row(block, m0), head,
                      map_batch(block));
        }
      });
    }
    if constexpr (kFused) {
      if (warp == 1 && elect_one_lane()) {
        // Pair j's tile (buffer j % 2) is full at phase j / 2 of its barrier; once the next one is issued, it
        // has been read, and its buffer is free.
        // The workspace tile of (head, query block m0): a packed call's sequences own runs of their own.
        const long long tiles = [&] {
          if constexpr (kVarlen)
            return varlen_dq_tiles_per_head(args.total_q, p.batch, kBlockM);
          else
            return static_cast<long long>((p.seqlen_q + kBlockM - 1) / kBlockM);
        }();
        const long long first_tile = [&] {
          if constexpr (kVarlen)
            return varlen_dq_first_tile(block.seq.first_q, block.batch, kBlockM);
          else
            return static_cast<long long>(block.batch) * p.heads_q * tiles;
        }();
        int pair = 0;
        block.template for_each_pair<kStages>(p, [&](int head, int m0, int, unsigned) {
          const int buffer = pair & 1;
          mbarrier_wait(dq_full(buffer), (pair >> 1) & 1);
          const long long tile = first_tile + head * tiles + m0 / kBlockM;
          bulk_reduce_add_f32(p.dq_accum + tile * (kBlockM * kHeadDim), dq_smem + buffer * kShape.dq_tile_bytes(),
                              kShape.dq_tile_bytes());
          tma_store_commit();
          tma_store_wait_read<1>();
          if (pair > 0) mbarrier_arrive(dq_empty(buffer ^ 1));
          ++pair;
        });
        bulk_wait_all();
      }
    }
    return;
  }

  registers_increase_to<kShape.consumer_registers()>();
  const int consumer = group - 1;
  const int warp_in_group = warp % 4;
  // This group's 64 keys inside every panel of the K and V tiles.
  const unsigned k_slice = k_smem + consumer * 64u * kPanelBytes;
  const unsigned v_slice = v_smem + consumer * 64u * kPanelBytes;
  // This lane's keys relative to n0: key_row and key_row + 8.
  const int key_row = 64 * consumer + 16 * warp_in_group + lane / 4;

  float acc_dk[kHeadDim / 2];
  float acc_dv[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] = 0.f, acc_dv[i] = 0.f;

  // A (rows x head dim) times B (rows x head dim) transposed, both K-major: S^T = K Q^T and dP^T = V dO^T.
  const auto issue_scores = [&](float(&acc)[kBlockM / 2], unsigned a_tile, unsigned b_tile) {
    const unsigned long long a_desc = make_smem_descriptor<kPanelBytes>(a_tile, 16, 8 * kPanelBytes);
    const unsigned long long b_desc = make_smem_descriptor<kPanelBytes>(b_tile, 16, 8 * kPanelBytes);
#pragma unroll
    for (int step = 0; step < kDSteps; ++step) {
      const unsigned panel = (step * 16) / kPanelElements;
      const unsigned inside = (step * 16) % kPanelElements * 2;  // bytes into the panel's rows
      const unsigned long long a = advance_descriptor(a_desc, panel * unsigned(kBlockN) * kPanelBytes + inside);
      const unsigned long long b = advance_descriptor(b_desc, panel * unsigned(kBlockM) * kPanelBytes + inside);
      Wgmma<T, kBlockM>::template ss<0>(acc, a, b, step > 0);
    }
  };
  // acc += frag (64 keys x block_m queries, packed) times the block_m x head_dim tile: the tile is the
  // MN-major B operand (head dim contiguous), panels block_m rows apart, 16 queries per step.
  const auto issue_gradient = [&](float(&acc)[kHeadDim / 2], const unsigned(&frag)[kQSteps][4],
                                  unsigned tile) {
    const unsigned long long desc =
        make_smem_descriptor<kPanelBytes>(tile, unsigned(kBlockM) * kPanelBytes, 8 * kPanelBytes);
#pragma unroll
    for (int step = 0; step < kQSteps; ++step) {
      const unsigned long long b = advance_descriptor(desc, step * 16u * kPanelBytes);
      Wgmma<T, kHeadDim>::template rs<1>(acc, frag[step], b, 1);
    }
  };

  const Block block(args);
  if (block.total > 0) mbarrier_wait(kv_full, 0);
  // The lengths that bound the block's queries and keys (the call's, or its sequence's).
  const auto seqlen_q = [&] {
    if constexpr (kVarlen)
      return block.seq.seqlen_q;
    else
      return p.seqlen_q;
  };
  const auto seqlen_kv = [&] {
    if constexpr (kVarlen)
      return block.seq.seqlen_kv;
    else
      return p.seqlen_kv;
  };
  if constexpr (kVarlen) {
    // K and V rows past the sequence's keys (the next sequence's, spare cache rows, or NaN): 0 before any
    // product, once per block. Their P is 0 by the mask's select; with V 0 their dP^T is 0 too, so dS^T =
    // P^T (dP^T - D) is 0 without a select of its own, and the fused kernel's dQ = dS K adds 0 (0 * NaN would
    // not be). Both groups write the same zeros over the whole tiles, each before its own products, so neither
    // waits for the other.
    const int keys_left = seqlen_kv() - block.n0;
    if (block.total > 0 && keys_left < kBlockN) {
      clear_panel_rows<kBlockN, kPanels, kPanelBytes>(k_smem, keys_left, tid % 128);
      clear_panel_rows<kBlockN, kPanels, kPanelBytes>(v_smem, keys_left, tid % 128);
      fence_async_shared();
      named_barrier_sync(1 + consumer, 128);
    }
  }
  const KeyMask<kMask> mask{seqlen_kv(), block.diag};
  const int n0 = block.n0;
  // The pairs' lse (log2 domain) and D: thread t of the group reads row t of the next pair from global memory
  // while this pair's products run, and stores it into the group's own buffer at the start of the next pair.
  // Two buffers alternate, so the group's barrier of one pair also orders the previous pair's reads before
  // the next pair's writes.
  const int stats_row = tid % 128;
  float2 next_stats{0.f, 0.f};
  const auto fetch_stats = [&](int head, int m0) {
    const long long row_base = [&] {  // where the query head's lse and D rows start
      if constexpr (kVarlen)
        return static_cast<long long>(head) * args.total_q + block.seq.first_q;
      else
        return (static_cast<long long>(block.batch) * p.heads_q + head) * p.seqlen_q;
    }();
    if (stats_row < kBlockM)
      next_stats = row_stats(p.lse + row_base, p.d_rows + row_base, m0 + stats_row, seqlen_q());
  };
  if (block.total > 0) fetch_stats(block.kv_head * p.kv_group, block.m_begin * kBlockM);
  int pairs = 0;
  block.template for_each_pair<kStages>(p, [&](int head, int m0, int stage, unsigned phase) {
    const int pair = pairs;
    const unsigned q_tile = q_smem + stage * kQBytes;
    const unsigned do_tile = do_smem + stage * kQBytes;
    mbarrier_wait(q_full(stage), phase);
    if constexpr (kVarlen) {
      // Rows past the sequence's queries: 0 before any product reads them. Both groups write the same zeros,
      // each before its own products (the stage goes back to the producer only after both); the group's
      // barrier id 1 + consumer, as the statistics' below. rows_left is the same for the whole group.
      const int rows_left = seqlen_q() - m0;
      if (rows_left < kBlockM) {
        clear_panel_rows<kBlockM, kPanels, kPanelBytes>(q_tile, rows_left, tid % 128);
        clear_panel_rows<kBlockM, kPanels, kPanelBytes>(do_tile, rows_left, tid % 128);
        fence_async_shared();
        named_barrier_sync(1 + consumer, 128);
      }
    }

    float acc_s[kBlockM / 2];
    float acc_dp[kBlockM / 2];
    wgmma_fence();
    issue_scores(acc_s, k_slice, q_tile);
    wgmma_commit();
    issue_scores(acc_dp, v_slice, do_tile);
    wgmma_commit();

    float* const lse_log2 = stats(2 * consumer + (pairs & 1));
    const float* const d_rows = lse_log2 + kBlockM;
    if (stats_row < kBlockM) lse_log2[stats_row] = next_stats.x, lse_log2[kBlockM + stats_row] = next_stats.y;
    named_barrier_sync(1 + consumer, 128);
    if (++pairs < block.total) {  // the next pair: the next query block, or the next head's first
      const bool next_head = m0 + kBlockM >= block.num_m_blocks * kBlockM;
      fetch_stats(next_head ? head + 1 : head, next_head ? block.m_begin * kBlockM : m0 + kBlockM);
    }
    wgmma_wait<1>();
    wgmma_hold(acc_s);

    // P^T. Register 4t + 2h + e holds key key_row + 8h, query m0 + 8t + 2 * (lane % 4) + e.
    const bool needs_mask = mask.tile_needs_mask(m0, n0, kBlockN);
    const auto local = mask.local(m0, n0);
    {
#pragma unroll
      for (int t = 0; t < kSTiles; ++t) {
        const int q_local = 8 * t + 2 * (lane % 4);
        const float2 lse2 = *reinterpret_cast<const float2*>(lse_log2 + q_local);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& s = acc_s[4 * t + 2 * h + e];
            const float prob = fast_exp2(s * p.scale_log2 - (e ? lse2.y : lse2.x));
            s = needs_mask && local.hides(q_local + e, key_row + 8 * h) ? 0.f : prob;
          }
      }
    }
    unsigned p_frag[kQSteps][4];
    pack_a_fragments<T>(acc_s, p_frag);

    // Where registers allow, dV runs while dS^T is formed.
    if constexpr (kOverlapDv) {
      wgmma_fence();
      issue_gradient(acc_dv, p_frag, do_tile);
      wgmma_commit();
      wgmma_wait<1>();  // dP^T
    } else {
      wgmma_wait<0>();
    }
    wgmma_hold(acc_dp);
    // dS^T = P^T (dP^T - D) in dP^T's place.
#pragma unroll
    for (int t = 0; t < kSTiles; ++t) {
      const float2 d2 = *reinterpret_cast<const float2*>(d_rows + 8 * t + 2 * (lane % 4));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc_dp[4 * t + i] = acc_s[4 * t + i] * (acc_dp[4 * t + i] - (i % 2 ? d2.y : d2.x));
      }
    }
    unsigned ds_frag[kQSteps][4];
    pack_a_fragments<T>(acc_dp, ds_frag);

    // The fused kernel's dQ = dS K of a pair falls to the two consumer groups in turn: the pair's dQ group
    // waits at the pair's named barrier for both halves of dS, the other only arrives, so the groups stay free
    // to drift apart (one's exponentials beside the other's products) as in the kernel without dQ. Named
    // barriers 1 + consumers + (pair % 2): dS stored; 3 + consumers + (pair % 2): dS read by dQ's product.
    // Each id alternates, so a group's arrival never joins the previous pair's count: it reaches pair j + 2
    // only through its own wait at pair j + 1, which needs the other group past pair j.
    const bool dq_group = kFused && (pair & 1) == consumer;
    if constexpr (kFused) {
      // This group's 64 keys of dS, transposed into key panel `consumer` of the dS tile: matrix j of a step
      // holds keys + 8 * (j % 2) and queries 16 * step + 8 * (j / 2); lane 8j + i addresses query i. The dQ
      // group first waits for the previous pair's product (the other group's) to have read the tile.
      if (dq_group && pair > 0) named_barrier_sync(3 + kConsumers + ((pair - 1) & 1), 256);
      const unsigned ds_panel = ds_smem + consumer * kBlockM * 128u;
      const int j = lane / 8;
      const int key_byte = 2 * (16 * warp_in_group + 8 * (j % 2));
#pragma unroll
      for (int step = 0; step < kQSteps; ++step)
        stmatrix_x4_trans(ds_panel + SwizzledPanel<128>::offset(16 * step + 8 * (j / 2) + lane % 8, key_byte),
                          ds_frag[step]);
      fence_async_shared();
      if (dq_group)
        named_barrier_sync(1 + kConsumers + (pair & 1), 256);
      else
        named_barrier_arrive(1 + kConsumers + (pair & 1), 256);
    }

    wgmma_fence();
    if constexpr (!kOverlapDv) issue_gradient(acc_dv, p_frag, do_tile);
    issue_gradient(acc_dk, ds_frag, q_tile);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold(acc_dv);
    wgmma_hold(acc_dk);
    wgmma_hold(p_frag);
    wgmma_hold(ds_frag);
    __syncwarp();
    if (lane == 0) mbarrier_arrive(q_empty(stage));

    if (dq_group) {
      const int buffer = pair & 1;  // each group's own tile: its previous use is pair - 2
      float* const dq_tile =
          reinterpret_cast<float*>(smem_raw + (dq_smem - raw) + buffer * kShape.dq_tile_bytes());
#pragma unroll 1
      for (int m_unit = 0; m_unit < kBlockM / 64; ++m_unit) {
        float acc_dq[kHeadDim / 2];
        const unsigned long long a_desc = make_smem_descriptor<128>(ds_smem + m_unit * 64u * 128u, 16, 8 * 128);
        const unsigned long long b_desc =
            make_smem_descriptor<kPanelBytes>(k_smem, unsigned(kBlockN) * kPanelBytes, 8 * kPanelBytes);
        wgmma_fence();
#pragma unroll
        for (int step = 0; step < kKeySteps; ++step) {
          const unsigned long long a =
              advance_descriptor(a_desc, (step / 4) * unsigned(kBlockM) * 128u + (step % 4) * 32u);
          const unsigned long long b = advance_descriptor(b_desc, step * 16u * kPanelBytes);
          Wgmma<T, kHeadDim>::template ss<1>(acc_dq, a, b, step > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold(acc_dq);
        if (m_unit == kBlockM / 64 - 1 && pair + 1 < block.total)  // dS is free for the next pair
          named_barrier_arrive(3 + kConsumers + (pair & 1), 256);
        // The tile's previous use (pair - 2) has been read by its bulk reduce-add.
        if (m_unit == 0) mbarrier_wait(dq_empty(buffer), ((pair >> 1) & 1) ^ 1);
#pragma unroll
        for (int t = 0; t < kHeadDim / 8; ++t)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            // Rows 16 * warp_in_group + lane / 4 + 8h, columns 8t + 2 * (lane % 4) of the slice.
            *reinterpret_cast<float2*>(dq_tile + dq_tile_fragment_offset(m_unit, 2 * t + h, tid % 128, kHeadDim)) =
                make_float2(acc_dq[4 * t + 2 * h] * p.scale, acc_dq[4 * t + 2 * h + 1] * p.scale);
          }
      }
      fence_async_shared();
      __syncwarp();
      if (lane == 0) mbarrier_arrive(dq_full(buffer));
    }
  });

  // dK (times the softmax scale) and dV of this lane's keys; keys past the end are not stored. Varlen: every
  // key the sequence owns, those past seqused_k included (their accumulators stayed 0); per thread, so no
  // store crosses into the next sequence's rows.
  T* dk_ptr = static_cast<T*>(p.d_k) + block.batch * p.dk_stride_batch + block.kv_head * p.dk_stride_head;
  T* dv_ptr = static_cast<T*>(p.d_v) + block.batch * p.dv_stride_batch + block.kv_head * p.dv_stride_head;
  if constexpr (kVarlen)
    dk_ptr += block.seq.first_k * p.dk_stride_seq, dv_ptr += block.seq.first_k * p.dv_stride_seq;
  const auto key_end = [&] {
    if constexpr (kVarlen)
      return block.seq.key_rows;
    else
      return p.seqlen_kv;
  };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long key = static_cast<long long>(n0) + key_row + 8 * h;
    if (key >= key_end()) continue;
#pragma unroll
    for (int t = 0; t < kDTiles; ++t) {
      const int col = 8 * t + 2 * (lane % 4);
      *reinterpret_cast<unsigned*>(dk_ptr + key * p.dk_stride_seq + col) =
          pack2<T>(acc_dk[4 * t + 2 * h] * p.scale, acc_dk[4 * t + 2 * h + 1] * p.scale);
      *reinterpret_cast<unsigned*>(dv_ptr + key * p.dv_stride_seq + col) =
          pack2<T>(acc_dv[4 * t + 2 * h], acc_dv[4 * t + 2 * h + 1]);
    }
  }
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kVarlen = false>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_backward_wgmma(const __grid_constant__ typename kernel::BackwardParamsOf<kVarlen>::type p,
                             const __grid_constant__ TmaDescriptor q_map,
                             const __grid_constant__ TmaDescriptor k_map,
                             const __grid_constant__ TmaDescriptor v_map,
                             const __grid_constant__ TmaDescriptor do_map) {
  backward_wgmma_block<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMask, false, kVarlen>(p, q_map, k_map,
                                                                                              v_map, do_map);
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kVarlen = false>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_backward_wgmma_fused(const __grid_constant__ typename kernel::BackwardParamsOf<kVarlen>::type p,
                                   const __grid_constant__ TmaDescriptor q_map,
                                   const __grid_constant__ TmaDescriptor k_map,
                                   const __grid_constant__ TmaDescriptor v_map,
                                   const __grid_constant__ TmaDescriptor do_map) {
  backward_wgmma_block<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMask, true, kVarlen>(p, q_map, k_map,
                                                                                             v_map, do_map);
}

}  // namespace flashrtc

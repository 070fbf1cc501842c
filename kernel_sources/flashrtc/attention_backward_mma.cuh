#pragma once
// Backward attention on tensor cores (fp16 / bf16 inputs, fp32 accumulation): FlashAttention-2's main
// backward kernel with mma.sync m16n8k16.
//
// One thread block owns block_n keys of one (batch, kv head): it loads their K and V once, then visits every
// query block of every query head of the kv head's group that sees any of its keys (query heads outer, query
// blocks inner, as one pipelined sequence). Per query block, each warp, for its 16 keys (MmaBackwardShape):
//   S^T  = K Q^T                 K by ldmatrix (A), Q by ldmatrix (B);
//   P^T  = exp2(S^T * scale * log2(e) - lse * log2(e))   recomputed with the forward's lse, masked like the
//   forward; dV  += P^T dO                P^T repacked from accumulators to 16-bit A fragments, dO by
//   ldmatrix.trans; dP^T = V dO^T,  dS^T = P^T (dP^T - D); dK  += dS^T Q                dS^T repacked
//   likewise, Q by ldmatrix.trans.
// dK and dV stay in registers across the whole group, so the sum over its query heads needs no atomics. dQ,
// unless a separate pass computes it (p.dq_accum null, deterministic mode): dS^T goes to shared memory in 16
// bits, the block computes dS K for its query block (dS by ldmatrix.trans as the A operand, K by
// ldmatrix.trans) and adds it into the fp32 workspace with atomics.
// Query blocks stream through one or two buffers (`stages`); with one, the next block loads during dQ.
//
// kVarlen: the variable-length backward (docs/varlen.md): the block's batch is a sequence, whose slice it
// runs as a dense problem of the sequence's lengths (varlen_sequence.cuh); keys the sequence owns past
// seqused_k get dK = dV = 0, and dQ always comes from the separate pass. Without it none of that is compiled.
#include "flashrtc/backward_params.cuh"
#include "flashrtc/backward_tiles.cuh"
#include "flashrtc/block_ranges.cuh"
#include "flashrtc/cp_async.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/mma.cuh"
#include "flashrtc/mma_backward_shape.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/varlen_sequence.cuh"

namespace flashrtc {

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kVarlen = false>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_backward_mma(const typename kernel::BackwardParamsOf<kVarlen>::type args) {
  static_assert(sizeof(T) == 2, "the tensor-core kernel takes 16-bit inputs");
  constexpr MmaBackwardShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the tensor-core backward kernel");
  constexpr int kThreads = kShape.threads();
  constexpr unsigned kRowBytes = kShape.rows().row_bytes();
  constexpr unsigned kDsRowBytes = kShape.ds_row_bytes();
  constexpr int kMT = kBlockM / 8;   // 8-query tiles of S^T and dP^T
  constexpr int kQS = kBlockM / 16;  // k-steps over queries (dV, dK); 16-row tiles of dQ
  constexpr int kKS = kShape.rows().head_dim_padded() / 16;  // k-steps over the head dim (S^T, dP^T)
  constexpr int kDT = kShape.dim_slice() / 8;                // 8-column tiles of this warp's dK and dV
  constexpr int kDQ = kShape.rows().head_dim_padded() / 16;  // 16-column tiles of dQ
  constexpr int kNS = kBlockN / 16;                          // k-steps over keys (dQ)
  // S^T and dP^T unrolled whole at d >= 128 spill the causal kernels (12-32 bytes at 32 query rows, ptxas for
  // sm_80 and sm_90a); 4 k-steps at a time do not.
  constexpr int kUnrollKS = kKS > 4 ? 4 : kKS;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  const unsigned k_base = smem_address(smem_raw);
  const unsigned v_base = k_base + kBlockN * kRowBytes;
  const unsigned stage0 = k_base + kShape.kv_smem_bytes();
  const unsigned ds_base = stage0 + kStages * kShape.stage_bytes();
  // Within a stage: Q rows, dO rows, then lse_log2[kBlockM] and D[kBlockM].
  constexpr unsigned kDoOffset = kBlockM * kRowBytes;
  constexpr unsigned kStatsOffset = 2 * kBlockM * kRowBytes;
  auto stats = [&](int stage) {
    return reinterpret_cast<float*>(smem_raw + kShape.kv_smem_bytes() + stage * kShape.stage_bytes() +
                                    kStatsOffset);
  };

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  const kernel::BackwardParams& p = kernel::dense_params(args);
  const int n_block = blockIdx.x % p.num_blocks;
  const int bh = blockIdx.x / p.num_blocks;
  const int kv_head = bh % p.heads_kv;
  const long long batch = bh / p.heads_kv;
  const long long n0 = static_cast<long long>(n_block) * kBlockN;
  VarlenSequence seq;  // the block's sequence (varlen only)
  if constexpr (kVarlen) {
    seq = varlen_sequence(args, static_cast<int>(batch));
    if (n0 >= seq.key_rows) return;  // no key of the sequence: nothing to write
  }
  // The lengths that bound the block's queries and keys (the call's, or its sequence's), where the sequence
  // starts in the packed tensors, and where a query head's lse and D rows start.
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
  const auto row_base = [&](long long head) {
    if constexpr (kVarlen)
      return head * args.total_q + seq.first_q;
    else
      return (batch * p.heads_q + head) * p.seqlen_q;
  };
  // dQ added here (never in the varlen kernel: its dQ pass is always separate).
  const auto adds_dq = [&] { return !kVarlen && p.dq_accum; };
  const long long diag = mask_diag<kMask>(seqlen_q(), seqlen_kv());
  const BlockRange m_blocks = query_blocks_seeing<kBlockM, kMask>(n0, diag, seqlen_q());
  const int m_begin = m_blocks.begin;
  // Keys past seqused_k are seen by no query: their dK and dV stay 0.
  const int m_count = kVarlen && n0 >= seqlen_kv() ? 0 : m_blocks.end - m_blocks.begin;
  const int total = m_count * p.kv_group;  // (query head, query block) pairs, heads outer

  const T* k_ptr = static_cast<const T*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
  const T* v_ptr = static_cast<const T*>(p.v) + batch * p.v_stride_batch + kv_head * p.v_stride_head;
  if constexpr (kVarlen) k_ptr += seq.first_k * p.k_stride_seq, v_ptr += seq.first_k * p.v_stride_seq;
  load_rows_async<T, kHeadDim, kBlockN, kThreads>(k_base, k_ptr, p.k_stride_seq, n0, seqlen_kv());
  load_rows_async<T, kHeadDim, kBlockN, kThreads>(v_base, v_ptr, p.v_stride_seq, n0, seqlen_kv());

  // The query head and first row of pair `it`.
  auto head_of = [&](int it) { return kv_head * p.kv_group + it / m_count; };
  auto m0_of = [&](int it) { return static_cast<long long>(m_begin + it % m_count) * kBlockM; };
  auto load_stage = [&](int it, int stage) {
    const long long head = head_of(it);
    const long long m0 = m0_of(it);
    const unsigned base = stage0 + stage * kShape.stage_bytes();
    const T* q_ptr = static_cast<const T*>(p.q) + batch * p.q_stride_batch + head * p.q_stride_head;
    const T* do_ptr = static_cast<const T*>(p.d_o) + batch * p.do_stride_batch + head * p.do_stride_head;
    if constexpr (kVarlen) q_ptr += seq.first_q * p.q_stride_seq, do_ptr += seq.first_q * p.do_stride_seq;
    load_rows_async<T, kHeadDim, kBlockM, kThreads>(base, q_ptr, p.q_stride_seq, m0, seqlen_q());
    load_rows_async<T, kHeadDim, kBlockM, kThreads>(base + kDoOffset, do_ptr, p.do_stride_seq, m0,
                                                    seqlen_q());
    const long long rows = row_base(head);
    float* s = stats(stage);
    load_row_stats<kBlockM, kThreads>(s, s + kBlockM, p.lse + rows, p.d_rows + rows, m0, seqlen_q());
  };
  if (total > 0) load_stage(0, 0);
  cp_async_commit();

  const int key_slice = warp % kShape.key_slices();
  const int dim_part = warp / kShape.key_slices();
  const int key_row0 = key_slice * 16;      // this warp's keys, relative to n0
  const int dim_chunk0 = dim_part * (kDT);  // first 8-column chunk of this warp's dK and dV
  // ldmatrix lane addresses (row, 16-byte chunk) in a tile; see mma.cuh for the fragment layouts:
  //   A, row-major rows x k (K, V):            row lane % 16,                      chunk lane / 16;
  //   B from rows n x k (Q, dO in S^T, dP^T):   row lane % 8 + 8 * (lane / 16),     chunk (lane / 8) % 2;
  //   B from rows k x n, .trans (dO, Q, K):     row lane % 8 + 8 * ((lane / 8) % 2), chunk lane / 16;
  //   A from rows k x m, .trans (dS^T for dQ):  row lane % 8 + 8 * (lane / 16),     chunk (lane / 8) % 2.
  const unsigned a_lane = unsigned(key_row0 + lane % 16) * kRowBytes + unsigned(lane / 16) * 16u;
  const unsigned b_lane = unsigned(lane % 8 + 8 * (lane / 16)) * kRowBytes + unsigned((lane / 8) % 2) * 16u;
  const unsigned t_lane = unsigned(lane % 8 + 8 * ((lane / 8) % 2)) * kRowBytes + unsigned(lane / 16) * 16u;
  const unsigned ds_lane =
      unsigned(lane % 8 + 8 * (lane / 16)) * kDsRowBytes + unsigned((lane / 8) % 2) * 16u;

  float acc_dk[kDT][4];
  float acc_dv[kDT][4];
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[dt][e] = 0.f, acc_dv[dt][e] = 0.f;

  for (int it = 0; it < total; ++it) {
    const int stage = kStages == 1 ? 0 : it % 2;
    const unsigned q_base = stage0 + stage * kShape.stage_bytes();
    const unsigned do_base = q_base + kDoOffset;
    const float* lse_log2 = stats(stage);
    const float* d_rows = lse_log2 + kBlockM;
    const long long m0 = m0_of(it);

    cp_async_wait<0>();
    // This stage is visible, and every warp is done with the previous pair: its buffers and dS^T can refill.
    __syncthreads();
    if (kStages == 2 && it + 1 < total) load_stage(it + 1, (it + 1) % 2);
    cp_async_commit();

    // S^T = K Q^T: 16 keys x kBlockM queries per warp.
    float acc_s[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[mt][e] = 0.f;
#pragma unroll kUnrollKS
    for (int ks = 0; ks < kKS; ++ks) {
      unsigned a[4];
      ldmatrix_x4(a, k_base + a_lane + ks * 32);
#pragma unroll
      for (int np = 0; np < kMT / 2; ++np) {
        unsigned b[4];
        ldmatrix_x4(b, q_base + b_lane + np * 16 * kRowBytes + ks * 32);
        mma_16816<T>(acc_s[2 * np], a, b[0], b[1]);
        mma_16816<T>(acc_s[2 * np + 1], a, b[2], b[3]);
      }
    }

    // P^T. An accumulator lane holds keys lane / 4 + {0, 8} and queries 2 * (lane % 4) + {0, 1} of each tile.
    {
      const KeyMask<kMask> mask{seqlen_kv(), diag};
      const bool needs_mask = mask.tile_needs_mask(m0, n0, kBlockN);
      const auto local = mask.local(m0, n0);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const int q_local = mt * 8 + 2 * (lane % 4);
        const float2 lse2 = *reinterpret_cast<const float2*>(lse_log2 + q_local);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float prob = fast_exp2(acc_s[mt][e] * p.scale_log2 - (e % 2 ? lse2.y : lse2.x));
          const int key_local = key_row0 + lane / 4 + 8 * (e / 2);
          acc_s[mt][e] = needs_mask && local.hides(q_local + e % 2, key_local) ? 0.f : prob;
        }
      }
    }

    // dV += P^T dO over this warp's dim slice.
#pragma unroll
    for (int qs = 0; qs < kQS; ++qs) {
      unsigned a[4];
      a[0] = pack2<T>(acc_s[2 * qs][0], acc_s[2 * qs][1]);
      a[1] = pack2<T>(acc_s[2 * qs][2], acc_s[2 * qs][3]);
      a[2] = pack2<T>(acc_s[2 * qs + 1][0], acc_s[2 * qs + 1][1]);
      a[3] = pack2<T>(acc_s[2 * qs + 1][2], acc_s[2 * qs + 1][3]);
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        unsigned b[4];
        ldmatrix_x4_trans(b, do_base + t_lane + qs * 16 * kRowBytes + (dim_chunk0 + 2 * dp) * 16);
        mma_16816<T>(acc_dv[2 * dp], a, b[0], b[1]);
        mma_16816<T>(acc_dv[2 * dp + 1], a, b[2], b[3]);
      }
    }

    // dP^T = V dO^T, then dS^T = P^T (dP^T - D) in its place.
    float acc_ds[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_ds[mt][e] = 0.f;
#pragma unroll kUnrollKS
    for (int ks = 0; ks < kKS; ++ks) {
      unsigned a[4];
      ldmatrix_x4(a, v_base + a_lane + ks * 32);
#pragma unroll
      for (int np = 0; np < kMT / 2; ++np) {
        unsigned b[4];
        ldmatrix_x4(b, do_base + b_lane + np * 16 * kRowBytes + ks * 32);
        mma_16816<T>(acc_ds[2 * np], a, b[0], b[1]);
        mma_16816<T>(acc_ds[2 * np + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const float2 d2 = *reinterpret_cast<const float2*>(d_rows + mt * 8 + 2 * (lane % 4));
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_ds[mt][e] = acc_s[mt][e] * (acc_ds[mt][e] - (e % 2 ? d2.y : d2.x));
    }

    // dK += dS^T Q over this warp's dim slice (scaled once at the end).
#pragma unroll
    for (int qs = 0; qs < kQS; ++qs) {
      unsigned a[4];
      a[0] = pack2<T>(acc_ds[2 * qs][0], acc_ds[2 * qs][1]);
      a[1] = pack2<T>(acc_ds[2 * qs][2], acc_ds[2 * qs][3]);
      a[2] = pack2<T>(acc_ds[2 * qs + 1][0], acc_ds[2 * qs + 1][1]);
      a[3] = pack2<T>(acc_ds[2 * qs + 1][2], acc_ds[2 * qs + 1][3]);
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        unsigned b[4];
        ldmatrix_x4_trans(b, q_base + t_lane + qs * 16 * kRowBytes + (dim_chunk0 + 2 * dp) * 16);
        mma_16816<T>(acc_dk[2 * dp], a, b[0], b[1]);
        mma_16816<T>(acc_dk[2 * dp + 1], a, b[2], b[3]);
      }
    }

    if (adds_dq() && dim_part == 0) {
      // dS^T in 16 bits, [keys, queries]: the warps of a key slice hold the same values, one writes them.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int key_local = key_row0 + lane / 4 + 8 * h;
          *reinterpret_cast<unsigned*>(smem_raw + (ds_base - k_base) + key_local * kDsRowBytes + mt * 16 +
                                       4 * (lane % 4)) = pack2<T>(acc_ds[mt][2 * h], acc_ds[mt][2 * h + 1]);
        }
    }
    if (kStages == 1 || adds_dq()) {
      // dS^T is visible; with one stage, every warp is done with this pair's Q and dO: the next pair loads
      // during dQ.
      __syncthreads();
    }
    if (kStages == 1 && it + 1 < total) {
      load_stage(it + 1, 0);
      cp_async_commit();
    }

    if (adds_dq()) {
      // dQ += dS K * scale for the block's queries: 16-row x 16-column tiles dealt to the warps.
      const long long head = head_of(it);
      float* dq_rows = p.dq_accum + (batch * p.heads_q + head) * p.seqlen_q * kHeadDim;
      for (int item = warp; item < kQS * kDQ; item += kWarps) {
        const int qt = item / kDQ;
        const int dq_tile = item % kDQ;
        float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int ns = 0; ns < kNS; ++ns) {
          unsigned a[4];
          unsigned b[4];
          ldmatrix_x4_trans(a, ds_base + ds_lane + ns * 16 * kDsRowBytes + qt * 32);
          ldmatrix_x4_trans(b, k_base + t_lane + ns * 16 * kRowBytes + dq_tile * 32);
          mma_16816<T>(acc[0], a, b[0], b[1]);
          mma_16816<T>(acc[1], a, b[2], b[3]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const long long row = m0 + qt * 16 + lane / 4 + 8 * h;
          if (row >= p.seqlen_q) continue;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int col = dq_tile * 16 + j * 8 + 2 * (lane % 4);
            if (col >= kHeadDim) continue;
            atomicAdd(dq_rows + row * kHeadDim + col, acc[j][2 * h] * p.scale);
            atomicAdd(dq_rows + row * kHeadDim + col + 1, acc[j][2 * h + 1] * p.scale);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // dK (times the softmax scale) and dV of this warp's keys and dim slice.
  // Varlen: every key the sequence owns, those past seqused_k included (their accumulators stayed 0).
  T* dk_ptr = static_cast<T*>(p.d_k) + batch * p.dk_stride_batch + kv_head * p.dk_stride_head;
  T* dv_ptr = static_cast<T*>(p.d_v) + batch * p.dv_stride_batch + kv_head * p.dv_stride_head;
  if constexpr (kVarlen) dk_ptr += seq.first_k * p.dk_stride_seq, dv_ptr += seq.first_k * p.dv_stride_seq;
  const auto key_end = [&] {
    if constexpr (kVarlen)
      return seq.key_rows;
    else
      return p.seqlen_kv;
  };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long key = n0 + key_row0 + lane / 4 + 8 * h;
    if (key >= key_end()) continue;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      const int col = (dim_chunk0 + dt) * 8 + 2 * (lane % 4);
      if (col >= kHeadDim) continue;
      *reinterpret_cast<unsigned*>(dk_ptr + key * p.dk_stride_seq + col) =
          pack2<T>(acc_dk[dt][2 * h] * p.scale, acc_dk[dt][2 * h + 1] * p.scale);
      *reinterpret_cast<unsigned*>(dv_ptr + key * p.dv_stride_seq + col) =
          pack2<T>(acc_dv[dt][2 * h], acc_dv[dt][2 * h + 1]);
    }
  }
}

}  // namespace flashrtc

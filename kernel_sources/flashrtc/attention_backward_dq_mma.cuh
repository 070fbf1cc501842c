#pragma once
// dQ of backward attention on tensor cores without atomics (the deterministic mode's separate pass): one
// thread block per (batch, query head, block_m queries), each warp owning 16 rows. Per key block of block_n
// keys:
//   S  = Q K^T,  P = exp2(S * scale * log2(e) - lse * log2(e))   masked like the forward;
//   dP = dO V^T, dS = P (dP - D);
//   dQ += dS K                   dS repacked from accumulators to 16-bit A fragments, K by ldmatrix.trans.
// K and V stream through one or two buffers (`stages`). Every dQ element is one thread's fixed sequence of
// additions: the same bits on every run.
//
// kVarlen: the variable-length backward's dQ (docs/varlen.md): the block's batch is a sequence, whose slice
// it runs as a dense problem of the sequence's lengths (varlen_sequence.cuh). Without it none of that is
// compiled.
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
    attention_backward_dq_mma(const typename kernel::BackwardParamsOf<kVarlen>::type args) {
  static_assert(sizeof(T) == 2, "the tensor-core kernel takes 16-bit inputs");
  constexpr MmaBackwardDqShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the tensor-core dQ kernel");
  constexpr int kThreads = kShape.threads();
  constexpr unsigned kRowBytes = kShape.rows().row_bytes();
  constexpr int kNT = kBlockN / 8;                           // 8-key tiles of S and dP
  constexpr int kKS = kShape.rows().head_dim_padded() / 16;  // k-steps over the head dim (S, dP)
  constexpr int kDT = kShape.rows().head_dim_padded() / 8;   // 8-column tiles of dQ
  constexpr int kNS = kBlockN / 16;                          // k-steps over keys (dQ)
  constexpr bool kCausal = kMask != kernel::Mask::kNone;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  const unsigned q_base = smem_address(smem_raw);
  const unsigned do_base = q_base + kBlockM * kRowBytes;
  float* const lse_log2 = reinterpret_cast<float*>(smem_raw + 2 * kBlockM * kRowBytes);
  float* const d_rows = lse_log2 + kBlockM;
  const unsigned kv0 = q_base + kShape.q_smem_bytes();  // stage s: K rows, then V rows

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  const kernel::BackwardParams& p = kernel::dense_params(args);
  const int m_linear = blockIdx.x % p.num_blocks;
  const int bh = blockIdx.x / p.num_blocks;
  const long long head = bh % p.heads_q;
  const long long batch = bh / p.heads_q;
  // Under a causal mask later query blocks see more keys: start them first so the tail of the grid is short.
  const int m_block = kCausal ? p.num_blocks - 1 - m_linear : m_linear;
  const long long m0 = static_cast<long long>(m_block) * kBlockM;
  const long long kv_head = head / p.kv_group;
  VarlenSequence seq;  // the block's sequence (varlen only)
  if constexpr (kVarlen) {
    seq = varlen_sequence(args, static_cast<int>(batch));
    if (m0 >= seq.seqlen_q) return;  // the grid covers max_seqlen_q rows of every sequence
  }
  // The lengths that bound the block's queries and keys: the call's, or its sequence's.
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
  const long long diag = mask_diag<kMask>(seqlen_q(), seqlen_kv());
  const int num_n_blocks = key_blocks_seen<kBlockN, kMask>(m0 + kBlockM, diag, seqlen_kv());

  const T* q_ptr = static_cast<const T*>(p.q) + batch * p.q_stride_batch + head * p.q_stride_head;
  const T* do_ptr = static_cast<const T*>(p.d_o) + batch * p.do_stride_batch + head * p.do_stride_head;
  const T* k_ptr = static_cast<const T*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
  const T* v_ptr = static_cast<const T*>(p.v) + batch * p.v_stride_batch + kv_head * p.v_stride_head;
  if constexpr (kVarlen) {
    q_ptr += seq.first_q * p.q_stride_seq, do_ptr += seq.first_q * p.do_stride_seq;
    k_ptr += seq.first_k * p.k_stride_seq, v_ptr += seq.first_k * p.v_stride_seq;
  }
  auto load_kv = [&](int n, int stage) {
    const unsigned base = kv0 + stage * kShape.kv_stage_bytes();
    const long long first = static_cast<long long>(n) * kBlockN;
    load_rows_async<T, kHeadDim, kBlockN, kThreads>(base, k_ptr, p.k_stride_seq, first, seqlen_kv());
    load_rows_async<T, kHeadDim, kBlockN, kThreads>(base + kBlockN * kRowBytes, v_ptr, p.v_stride_seq, first,
                                                    seqlen_kv());
  };
  load_rows_async<T, kHeadDim, kBlockM, kThreads>(q_base, q_ptr, p.q_stride_seq, m0, seqlen_q());
  load_rows_async<T, kHeadDim, kBlockM, kThreads>(do_base, do_ptr, p.do_stride_seq, m0, seqlen_q());
  // lse and D: [batch, heads_q, seqlen_q], or varlen [heads_q, total_q].
  const long long row_base = [&] {
    if constexpr (kVarlen)
      return head * args.total_q + seq.first_q;
    else
      return (batch * p.heads_q + head) * p.seqlen_q;
  }();
  load_row_stats<kBlockM, kThreads>(lse_log2, d_rows, p.lse + row_base, p.d_rows + row_base, m0, seqlen_q());
  if (num_n_blocks > 0) load_kv(0, 0);
  cp_async_commit();

  const int warp_row0 = warp * 16;  // this warp's rows, relative to m0
  // ldmatrix lane addresses (row, 16-byte chunk) in a tile; see mma.cuh for the fragment layouts:
  //   A, row-major rows x k (Q, dO):       row lane % 16,                      chunk lane / 16;
  //   B from rows n x k (K in S, V in dP):  row lane % 8 + 8 * (lane / 16),     chunk (lane / 8) % 2;
  //   B from rows k x n, .trans (K in dQ):  row lane % 8 + 8 * ((lane / 8) % 2), chunk lane / 16.
  const unsigned a_lane = unsigned(warp_row0 + lane % 16) * kRowBytes + unsigned(lane / 16) * 16u;
  const unsigned b_lane = unsigned(lane % 8 + 8 * (lane / 16)) * kRowBytes + unsigned((lane / 8) % 2) * 16u;
  const unsigned t_lane = unsigned(lane % 8 + 8 * ((lane / 8) % 2)) * kRowBytes + unsigned(lane / 16) * 16u;

  float acc_dq[kDT][4];
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dq[dt][e] = 0.f;

  for (int n = 0; n < num_n_blocks; ++n) {
    const int stage = kStages == 1 ? 0 : n % 2;
    const unsigned k_base = kv0 + stage * kShape.kv_stage_bytes();
    const unsigned v_base = k_base + kBlockN * kRowBytes;
    const long long n0 = static_cast<long long>(n) * kBlockN;

    cp_async_wait<0>();
    // K(n) and V(n) are visible, and every warp is done with block n - 1: its buffers can refill.
    __syncthreads();
    if (kStages == 2 && n + 1 < num_n_blocks) load_kv(n + 1, (n + 1) % 2);
    cp_async_commit();

    // An accumulator lane holds rows lane / 4 + {0, 8} and keys 2 * (lane % 4) + {0, 1} of each tile.
    float lse_row[2], d_row[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lse_row[h] = lse_log2[warp_row0 + lane / 4 + 8 * h];
      d_row[h] = d_rows[warp_row0 + lane / 4 + 8 * h];
    }

    float acc_s[kNT][4];
    float acc_dp[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[nt][e] = 0.f, acc_dp[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      unsigned aq[4];
      unsigned ado[4];
      ldmatrix_x4(aq, q_base + a_lane + ks * 32);
      ldmatrix_x4(ado, do_base + a_lane + ks * 32);
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        unsigned bk[4];
        unsigned bv[4];
        ldmatrix_x4(bk, k_base + b_lane + np * 16 * kRowBytes + ks * 32);
        ldmatrix_x4(bv, v_base + b_lane + np * 16 * kRowBytes + ks * 32);
        mma_16816<T>(acc_s[2 * np], aq, bk[0], bk[1]);
        mma_16816<T>(acc_s[2 * np + 1], aq, bk[2], bk[3]);
        mma_16816<T>(acc_dp[2 * np], ado, bv[0], bv[1]);
        mma_16816<T>(acc_dp[2 * np + 1], ado, bv[2], bv[3]);
      }
    }

    // dS = P (dP - D), P recomputed and masked.
    const KeyMask<kMask> mask{seqlen_kv(), diag};
    const bool needs_mask = mask.tile_needs_mask(m0, n0, kBlockN);
    const auto local = mask.local(m0, n0);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const float prob = fast_exp2(acc_s[nt][e] * p.scale_log2 - lse_row[h]);
        const int row_local = warp_row0 + lane / 4 + 8 * h;
        const int key_local = nt * 8 + 2 * (lane % 4) + e % 2;
        const float visible = needs_mask && local.hides(row_local, key_local) ? 0.f : prob;
        acc_dp[nt][e] = visible * (acc_dp[nt][e] - d_row[h]);
      }

      // dQ += dS K (scaled once at the end).
#pragma unroll
    for (int ns = 0; ns < kNS; ++ns) {
      unsigned a[4];
      a[0] = pack2<T>(acc_dp[2 * ns][0], acc_dp[2 * ns][1]);
      a[1] = pack2<T>(acc_dp[2 * ns][2], acc_dp[2 * ns][3]);
      a[2] = pack2<T>(acc_dp[2 * ns + 1][0], acc_dp[2 * ns + 1][1]);
      a[3] = pack2<T>(acc_dp[2 * ns + 1][2], acc_dp[2 * ns + 1][3]);
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        unsigned b[4];
        ldmatrix_x4_trans(b, k_base + t_lane + ns * 16 * kRowBytes + dp * 32);
        mma_16816<T>(acc_dq[2 * dp], a, b[0], b[1]);
        mma_16816<T>(acc_dq[2 * dp + 1], a, b[2], b[3]);
      }
    }

    if (kStages == 1) {
      __syncthreads();  // every warp is done with K(n) and V(n): the single buffer can refill
      if (n + 1 < num_n_blocks) load_kv(n + 1, 0);
      cp_async_commit();
    }
  }
  cp_async_wait<0>();

  T* dq_ptr = static_cast<T*>(p.d_q) + batch * p.dq_stride_batch + head * p.dq_stride_head;
  if constexpr (kVarlen) dq_ptr += seq.first_q * p.dq_stride_seq;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = m0 + warp_row0 + lane / 4 + 8 * h;
    if (row >= seqlen_q()) continue;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      const int col = dt * 8 + 2 * (lane % 4);
      if (col >= kHeadDim) continue;
      *reinterpret_cast<unsigned*>(dq_ptr + row * p.dq_stride_seq + col) =
          pack2<T>(acc_dq[dt][2 * h] * p.scale, acc_dq[dt][2 * h + 1] * p.scale);
    }
  }
}

}  // namespace flashrtc

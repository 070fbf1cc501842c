#pragma once
// Backward attention on CUDA cores in exact fp32 arithmetic (fp32 inputs): FlashAttention-2's algorithm with
// every tile in shared memory (simt_backward_shape.cuh).
//   attention_backward_simt:    one block per block_n keys of one (batch, kv head), over every query block of
//                               every query head of its group that sees them: P^T and dS^T per tile, then
//                               dV += P^T dO and dK += dS^T Q in registers (no atomics), and, unless a
//                               separate pass computes dQ, dQ += dS K added into the fp32 workspace with
//                               atomics;
//   attention_backward_dq_simt: the deterministic mode's dQ pass, one block per block_m queries: dS per key
//                               tile, dQ += dS K in registers.
#include "flashrtc/backward_params.cuh"
#include "flashrtc/backward_tiles.cuh"
#include "flashrtc/block_ranges.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/simt_backward_shape.cuh"

namespace flashrtc {

// Rows [row0, row0 + kRows) of a [seq, head_dim] matrix into a tile of kPitch-float rows; rows at or past
// rows_end read as zeros.
template <int kHeadDim, int kRows, int kPitch, int kThreads>
__device__ __forceinline__ void load_rows_simt(float* dst, const float* src, long long stride_seq,
                                               long long row0, long long rows_end) {
  for (int i = threadIdx.x; i < kRows * kHeadDim; i += kThreads) {
    const int r = i / kHeadDim;
    const int e = i % kHeadDim;
    dst[r * kPitch + e] = row0 + r < rows_end ? src[(row0 + r) * stride_seq + e] : 0.f;
  }
}

template <int kHeadDim>
__device__ __forceinline__ float dot_rows(const float* a, const float* b) {
  float s = 0.f;
#pragma unroll 8
  for (int e = 0; e < kHeadDim; ++e) s = fmaf(a[e], b[e], s);
  return s;
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask>
__global__ void __launch_bounds__(kWarps * 32, 1) attention_backward_simt(const kernel::BackwardParams p) {
  static_assert(sizeof(T) == 4, "the SIMT backward kernel takes fp32 inputs");
  constexpr SimtBackwardShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the SIMT backward kernel");
  constexpr int kThreads = kShape.threads();
  constexpr int kPitch = kShape.row_pitch();
  constexpr int kSP = kShape.score_pitch();
  constexpr int kAcc = kBlockN * kHeadDim / kThreads;

  extern __shared__ __align__(16) float smem[];
  float* const k_s = smem;
  float* const v_s = k_s + kBlockN * kPitch;
  float* const q_s = v_s + kBlockN * kPitch;
  float* const do_s = q_s + kBlockM * kPitch;
  float* const p_s = do_s + kBlockM * kPitch;  // P^T [keys][queries]
  float* const ds_s = p_s + kBlockN * kSP;     // dS^T
  float* const lse_s = ds_s + kBlockN * kSP;
  float* const d_s = lse_s + kBlockM;
  const int tid = threadIdx.x;

  const int n_block = blockIdx.x % p.num_blocks;
  const int bh = blockIdx.x / p.num_blocks;
  const int kv_head = bh % p.heads_kv;
  const long long batch = bh / p.heads_kv;
  const long long n0 = static_cast<long long>(n_block) * kBlockN;
  const long long diag = mask_diag<kMask>(p.seqlen_q, p.seqlen_kv);
  const BlockRange m_blocks = query_blocks_seeing<kBlockM, kMask>(n0, diag, p.seqlen_q);
  const int m_begin = m_blocks.begin;
  const int m_count = m_blocks.end - m_blocks.begin;
  const int total = m_count * p.kv_group;  // (query head, query block) pairs, heads outer

  const float* k_ptr = static_cast<const float*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
  const float* v_ptr = static_cast<const float*>(p.v) + batch * p.v_stride_batch + kv_head * p.v_stride_head;
  load_rows_simt<kHeadDim, kBlockN, kPitch, kThreads>(k_s, k_ptr, p.k_stride_seq, n0, p.seqlen_kv);
  load_rows_simt<kHeadDim, kBlockN, kPitch, kThreads>(v_s, v_ptr, p.v_stride_seq, n0, p.seqlen_kv);

  float acc_dk[kAcc];
  float acc_dv[kAcc];
#pragma unroll
  for (int a = 0; a < kAcc; ++a) acc_dk[a] = 0.f, acc_dv[a] = 0.f;

  for (int it = 0; it < total; ++it) {
    const long long head = kv_head * p.kv_group + it / m_count;
    const long long m0 = static_cast<long long>(m_begin + it % m_count) * kBlockM;
    __syncthreads();  // every thread is done with the previous pair's rows and scores
    const float* q_ptr = static_cast<const float*>(p.q) + batch * p.q_stride_batch + head * p.q_stride_head;
    const float* do_ptr =
        static_cast<const float*>(p.d_o) + batch * p.do_stride_batch + head * p.do_stride_head;
    load_rows_simt<kHeadDim, kBlockM, kPitch, kThreads>(q_s, q_ptr, p.q_stride_seq, m0, p.seqlen_q);
    load_rows_simt<kHeadDim, kBlockM, kPitch, kThreads>(do_s, do_ptr, p.do_stride_seq, m0, p.seqlen_q);
    const long long row_base = (batch * p.heads_q + head) * p.seqlen_q;
    load_row_stats<kBlockM, kThreads>(lse_s, d_s, p.lse + row_base, p.d_rows + row_base, m0, p.seqlen_q);
    __syncthreads();

    const KeyMask<kMask> mask{p.seqlen_kv, diag};
    const bool needs_mask = mask.tile_needs_mask(m0, n0, kBlockN);
    const auto local = mask.local(m0, n0);
    for (int i = tid; i < kBlockN * kBlockM; i += kThreads) {
      const int r = i / kBlockM;  // key
      const int c = i % kBlockM;  // query
      const float s = dot_rows<kHeadDim>(k_s + r * kPitch, q_s + c * kPitch);
      const float dp = dot_rows<kHeadDim>(v_s + r * kPitch, do_s + c * kPitch);
      const float prob = needs_mask && local.hides(c, r) ? 0.f : exp2f(s * p.scale_log2 - lse_s[c]);
      p_s[r * kSP + c] = prob;
      ds_s[r * kSP + c] = prob * (dp - d_s[c]);
    }
    __syncthreads();

#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
      const int i = tid + a * kThreads;
      const int r = i / kHeadDim;
      const int e = i % kHeadDim;
      float dv = acc_dv[a], dk = acc_dk[a];
#pragma unroll 4
      for (int c = 0; c < kBlockM; ++c) {
        dv = fmaf(p_s[r * kSP + c], do_s[c * kPitch + e], dv);
        dk = fmaf(ds_s[r * kSP + c], q_s[c * kPitch + e], dk);
      }
      acc_dv[a] = dv, acc_dk[a] = dk;
    }

    if (p.dq_accum) {
      float* dq_rows = p.dq_accum + (batch * p.heads_q + head) * p.seqlen_q * kHeadDim;
      for (int i = tid; i < kBlockM * kHeadDim; i += kThreads) {
        const int c = i / kHeadDim;
        const int e = i % kHeadDim;
        if (m0 + c >= p.seqlen_q) continue;
        float sum = 0.f;
#pragma unroll 4
        for (int r = 0; r < kBlockN; ++r) sum = fmaf(ds_s[r * kSP + c], k_s[r * kPitch + e], sum);
        atomicAdd(dq_rows + (m0 + c) * kHeadDim + e, sum * p.scale);
      }
    }
  }

  float* dk_ptr = static_cast<float*>(p.d_k) + batch * p.dk_stride_batch + kv_head * p.dk_stride_head;
  float* dv_ptr = static_cast<float*>(p.d_v) + batch * p.dv_stride_batch + kv_head * p.dv_stride_head;
#pragma unroll
  for (int a = 0; a < kAcc; ++a) {
    const int i = tid + a * kThreads;
    const long long key = n0 + i / kHeadDim;
    const int e = i % kHeadDim;
    if (key >= p.seqlen_kv) continue;
    dk_ptr[key * p.dk_stride_seq + e] = acc_dk[a] * p.scale;
    dv_ptr[key * p.dv_stride_seq + e] = acc_dv[a];
  }
}

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask>
__global__ void __launch_bounds__(kWarps * 32, 1) attention_backward_dq_simt(const kernel::BackwardParams p) {
  static_assert(sizeof(T) == 4, "the SIMT backward kernel takes fp32 inputs");
  constexpr SimtBackwardDqShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the SIMT dQ kernel");
  constexpr int kThreads = kShape.threads();
  constexpr int kPitch = kShape.row_pitch();
  constexpr int kSP = kShape.score_pitch();
  constexpr int kAcc = kBlockM * kHeadDim / kThreads;
  constexpr bool kCausal = kMask != kernel::Mask::kNone;

  extern __shared__ __align__(16) float smem[];
  float* const q_s = smem;
  float* const do_s = q_s + kBlockM * kPitch;
  float* const k_s = do_s + kBlockM * kPitch;
  float* const v_s = k_s + kBlockN * kPitch;
  float* const ds_s = v_s + kBlockN * kPitch;  // dS [queries][keys]
  float* const lse_s = ds_s + kBlockM * kSP;
  float* const d_s = lse_s + kBlockM;
  const int tid = threadIdx.x;

  const int m_linear = blockIdx.x % p.num_blocks;
  const int bh = blockIdx.x / p.num_blocks;
  const long long head = bh % p.heads_q;
  const long long batch = bh / p.heads_q;
  // Under a causal mask later query blocks see more keys: start them first so the tail of the grid is short.
  const int m_block = kCausal ? p.num_blocks - 1 - m_linear : m_linear;
  const long long m0 = static_cast<long long>(m_block) * kBlockM;
  const long long kv_head = head / p.kv_group;
  const long long diag = mask_diag<kMask>(p.seqlen_q, p.seqlen_kv);
  const int num_n_blocks = key_blocks_seen<kBlockN, kMask>(m0 + kBlockM, diag, p.seqlen_kv);

  const float* q_ptr = static_cast<const float*>(p.q) + batch * p.q_stride_batch + head * p.q_stride_head;
  const float* do_ptr =
      static_cast<const float*>(p.d_o) + batch * p.do_stride_batch + head * p.do_stride_head;
  const float* k_ptr = static_cast<const float*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
  const float* v_ptr = static_cast<const float*>(p.v) + batch * p.v_stride_batch + kv_head * p.v_stride_head;
  load_rows_simt<kHeadDim, kBlockM, kPitch, kThreads>(q_s, q_ptr, p.q_stride_seq, m0, p.seqlen_q);
  load_rows_simt<kHeadDim, kBlockM, kPitch, kThreads>(do_s, do_ptr, p.do_stride_seq, m0, p.seqlen_q);
  const long long row_base = (batch * p.heads_q + head) * p.seqlen_q;
  load_row_stats<kBlockM, kThreads>(lse_s, d_s, p.lse + row_base, p.d_rows + row_base, m0, p.seqlen_q);

  float acc[kAcc];
#pragma unroll
  for (int a = 0; a < kAcc; ++a) acc[a] = 0.f;

  for (int n = 0; n < num_n_blocks; ++n) {
    const long long n0 = static_cast<long long>(n) * kBlockN;
    __syncthreads();  // every thread is done with the previous key block
    load_rows_simt<kHeadDim, kBlockN, kPitch, kThreads>(k_s, k_ptr, p.k_stride_seq, n0, p.seqlen_kv);
    load_rows_simt<kHeadDim, kBlockN, kPitch, kThreads>(v_s, v_ptr, p.v_stride_seq, n0, p.seqlen_kv);
    __syncthreads();

    const KeyMask<kMask> mask{p.seqlen_kv, diag};
    const bool needs_mask = mask.tile_needs_mask(m0, n0, kBlockN);
    const auto local = mask.local(m0, n0);
    for (int i = tid; i < kBlockM * kBlockN; i += kThreads) {
      const int c = i / kBlockN;  // query
      const int j = i % kBlockN;  // key
      const float s = dot_rows<kHeadDim>(q_s + c * kPitch, k_s + j * kPitch);
      const float dp = dot_rows<kHeadDim>(do_s + c * kPitch, v_s + j * kPitch);
      const float prob = needs_mask && local.hides(c, j) ? 0.f : exp2f(s * p.scale_log2 - lse_s[c]);
      ds_s[c * kSP + j] = prob * (dp - d_s[c]);
    }
    __syncthreads();

#pragma unroll
    for (int a = 0; a < kAcc; ++a) {
      const int i = tid + a * kThreads;
      const int c = i / kHeadDim;
      const int e = i % kHeadDim;
      float sum = acc[a];
#pragma unroll 4
      for (int j = 0; j < kBlockN; ++j) sum = fmaf(ds_s[c * kSP + j], k_s[j * kPitch + e], sum);
      acc[a] = sum;
    }
  }

  float* dq_ptr = static_cast<float*>(p.d_q) + batch * p.dq_stride_batch + head * p.dq_stride_head;
#pragma unroll
  for (int a = 0; a < kAcc; ++a) {
    const int i = tid + a * kThreads;
    const long long row = m0 + i / kHeadDim;
    if (row < p.seqlen_q) dq_ptr[row * p.dq_stride_seq + i % kHeadDim] = acc[a] * p.scale;
  }
}

}  // namespace flashrtc

#pragma once
// Forward attention on CUDA cores (fp32; fp16 and bf16 run on the tensor-core kernel): FlashAttention-2's
// loop order.
//
// One thread block owns block_m query rows of one (batch, head). It walks the key sequence in tiles of
// block_n rows: S = Q K^T in registers, online softmax (running max and sum, exp2 with the scale folded in),
// then O += P V with O in registers. K and V tiles stream through shared memory with cp.async, `stages`
// tiles deep, the next K tile loading during softmax and P V, the next V tile during Q K^T.
//
// Each thread holds a rows_per_thread x cols_per_thread block of S and the matching rows of O; the
// row_threads threads of one query row sit in one warp, so row max and row sum are warp shuffles.
#include "flashrtc/cp_async.cuh"
#include "flashrtc/float_vectors.cuh"
#include "flashrtc/forward_block.cuh"
#include "flashrtc/forward_epilogue.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/mask.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/simt_forward_shape.cuh"
#include "flashrtc/varlen_sequence.cuh"

namespace flashrtc {

template <typename T>
constexpr bool kIsFloat = false;
template <>
constexpr bool kIsFloat<float> = true;

// kVarlen: the variable-length forward over the sequences of a packed call (docs/varlen.md), as the
// tensor-core kernel's: each block runs its sequence's slice as a dense problem of the sequence's lengths
// (varlen_sequence.cuh). Without it none of that is compiled: the dense kernel's code is the same.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask,
          bool kVarlen = false>
// Min one block per SM: without it ptxas caps registers to fit several blocks (168 at 4 warps, 128 at 8) and
// spills the register tile; shared memory already limits how many blocks share an SM.
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_forward_simt(const typename kernel::ForwardParamsOf<kVarlen>::type args) {
  // T stays a template argument so the kernel's name spells its element type like the other families.
  static_assert(kIsFloat<T>,
                "the SIMT kernel takes fp32 inputs (fp16 and bf16 run on the tensor-core kernel)");
  constexpr SimtForwardShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the SIMT forward kernel");
  constexpr int kThreads = kShape.threads();
  constexpr int kRowThreads = kShape.row_threads();
  constexpr int kTM = kShape.rows_per_thread();
  constexpr int kTN = kShape.cols_per_thread();
  constexpr int kTD = kShape.dims_per_thread();
  constexpr int kVec = kShape.vec();
  constexpr int kPitch = kShape.row_pitch();
  constexpr int kPPitch = kShape.p_pitch();
  constexpr int kChunksPerRow = kHeadDim / 4;  // 16-byte chunks

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* q_smem = reinterpret_cast<float*>(smem_raw);
  float* k_smem = q_smem + kBlockM * kPitch;
  float* v_smem = k_smem + kStages * kBlockN * kPitch;
  float* p_smem = reinterpret_cast<float*>(v_smem + kStages * kBlockN * kPitch);

  const int tid = threadIdx.x;
  const int tc = tid % kRowThreads;
  const int tr = tid / kRowThreads;

  const kernel::ForwardParams& p = kernel::dense_params(args);
  ForwardBlock<float, kBlockM, kBlockN, kMask> block(p);
  VarlenSequence seq;  // the block's sequence (varlen only)
  if constexpr (kVarlen) {
    if (!bind_varlen_sequence(args, block, seq)) return;
  }
  // The lengths that bound the block's rows and keys: the call's, or its sequence's (read where used, as in
  // the tensor-core kernel).
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
  const long long m0 = block.m0;
  const int num_n_blocks = block.num_n_blocks;
  const float* q_ptr = block.q;
  const float* k_ptr = block.k;
  const float* v_ptr = block.v;
  float* o_ptr = block.o;
  float* lse_ptr = block.lse;

  if (num_n_blocks == 0) {
    const RowTile<kTM, kRowThreads, kTD / kVec, kVec> tile{tr * kTM, tc};
    if constexpr (kVarlen)
      store_rows_without_keys<kHeadDim>(block, sequence_params(p, seq), tile);
    else
      store_rows_without_keys<kHeadDim>(block, p, tile);
    return;
  }

  auto load_rows = [&](float* dst, const float* src, long long stride_seq, long long row0, long long rows_end,
                       int rows) {
    for (int c = tid; c < rows * kChunksPerRow; c += kThreads) {
      const int r = c / kChunksPerRow;
      const int chunk = c % kChunksPerRow;
      const long long row = row0 + r;
      const bool valid = row < rows_end;
      const float* src_chunk = valid ? src + row * stride_seq + chunk * 4 : src;
      cp_async_16(dst + r * kPitch + chunk * 4, src_chunk, valid);
    }
  };

  // Commit groups, in order: [Q, K0], [V0], [K1], [V1], ...: each tile is one group, so waiting until at
  // most 2 * kStages - 1 groups are pending always means "the tile needed next has landed".
  load_rows(q_smem, q_ptr, p.q_stride_seq, m0, seqlen_q(), kBlockM);
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < num_n_blocks)
      load_rows(k_smem + s * kBlockN * kPitch, k_ptr, p.k_stride_seq, static_cast<long long>(s) * kBlockN,
                seqlen_kv(), kBlockN);
    cp_async_commit();
    if (s < num_n_blocks)
      load_rows(v_smem + s * kBlockN * kPitch, v_ptr, p.v_stride_seq, static_cast<long long>(s) * kBlockN,
                seqlen_kv(), kBlockN);
    cp_async_commit();
  }

  float o_acc[kTM][kTD];
  float m_run[kTM];
  float l_run[kTM];  // this thread's part of the row sum; the row_threads parts are added at the end
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    m_run[i] = negative_infinity();
    l_run[i] = 0.f;
#pragma unroll
    for (int d = 0; d < kTD; ++d) o_acc[i][d] = 0.f;
  }

  for (int n = 0; n < num_n_blocks; ++n) {
    const int stage = kStages == 1 ? 0 : n % kStages;
    float* k_stage = k_smem + stage * kBlockN * kPitch;
    float* v_stage = v_smem + stage * kBlockN * kPitch;
    const long long n0 = static_cast<long long>(n) * kBlockN;

    cp_async_wait<2 * kStages - 1>();
    __syncthreads();

    float s[kTM][kTN];
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int t = 0; t < kTN; ++t) s[i][t] = 0.f;
#pragma unroll 4
    for (int k = 0; k < kHeadDim; k += 4) {
      float qf[kTM][4];
      float kf[kTN][4];
#pragma unroll
      for (int i = 0; i < kTM; ++i) load_floats<4>(q_smem + (tr * kTM + i) * kPitch + k, qf[i]);
#pragma unroll
      for (int t = 0; t < kTN; ++t) load_floats<4>(k_stage + (tc + t * kRowThreads) * kPitch + k, kf[t]);
#pragma unroll
      for (int e = 0; e < 4; ++e)
#pragma unroll
        for (int i = 0; i < kTM; ++i)
#pragma unroll
          for (int t = 0; t < kTN; ++t) s[i][t] = fmaf(qf[i][e], kf[t][e], s[i][t]);
    }
    __syncthreads();  // every thread is done with this K stage: refill it
    if (n + kStages < num_n_blocks)
      load_rows(k_stage, k_ptr, p.k_stride_seq, n0 + kStages * kBlockN, seqlen_kv(), kBlockN);
    cp_async_commit();

    // Scale first, then mask: a negative scale must not turn a masked -inf into +inf.
    // Built per tile, not once at the top: hoisted, it moved ptxas's allocation (28 predicates saved to
    // registers in the mask at d = 64, measured).
    const KeyMask<kMask> mask{seqlen_kv(), block.diag};
    const bool needs_mask = mask.tile_needs_mask(m0, n0, kBlockN);
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int t = 0; t < kTN; ++t) s[i][t] *= p.scale_log2;
    if (needs_mask) {
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
        const long long row = m0 + tr * kTM + i;
#pragma unroll
        for (int t = 0; t < kTN; ++t) {
          const long long col = n0 + tc + t * kRowThreads;
          if (mask.hides(row, col)) s[i][t] = negative_infinity();
        }
      }
    }

#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      const SoftmaxStep step =
          online_softmax_step<kRowThreads, kTN>(m_run[i], l_run[i], [&](int t) -> float& { return s[i][t]; });
#pragma unroll
      for (int t = 0; t < kTN; ++t) p_smem[(tr * kTM + i) * kPPitch + tc + t * kRowThreads] = s[i][t];
#pragma unroll
      for (int d = 0; d < kTD; ++d) o_acc[i][d] *= step.alpha;
    }

    cp_async_wait<2 * kStages - 1>();  // this V tile has landed
    __syncthreads();                   // and P is visible to the whole block

#pragma unroll 2
    for (int j = 0; j < kBlockN; j += 4) {
      float pf[kTM][4];
#pragma unroll
      for (int i = 0; i < kTM; ++i) load_floats<4>(p_smem + (tr * kTM + i) * kPPitch + j, pf[i]);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
        for (int u = 0; u < kTD / kVec; ++u) {
          float vf[kVec];
          load_floats<kVec>(v_stage + (j + jj) * kPitch + kVec * (tc + u * kRowThreads), vf);
#pragma unroll
          for (int i = 0; i < kTM; ++i)
#pragma unroll
            for (int e = 0; e < kVec; ++e)
              o_acc[i][u * kVec + e] = fmaf(pf[i][jj], vf[e], o_acc[i][u * kVec + e]);
        }
      }
    }
    __syncthreads();  // every thread is done with this V stage and with P
    if (n + kStages < num_n_blocks)
      load_rows(v_stage, v_ptr, p.v_stride_seq, n0 + kStages * kBlockN, seqlen_kv(), kBlockN);
    cp_async_commit();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const float l = row_lanes_sum<kRowThreads>(l_run[i]);
    const long long row = m0 + tr * kTM + i;
    if (row >= seqlen_q()) continue;
    const float inv_l = inverse_row_sum(l);
#pragma unroll
    for (int u = 0; u < kTD / kVec; ++u) {
      float out[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) out[e] = o_acc[i][u * kVec + e] * inv_l;
      store_floats<kVec>(o_ptr + row * p.o_stride_seq + kVec * (tc + u * kRowThreads), out);
    }
    if (lse_ptr && tc == 0) lse_ptr[row] = row_lse(m_run[i], l);
  }
}

}  // namespace flashrtc

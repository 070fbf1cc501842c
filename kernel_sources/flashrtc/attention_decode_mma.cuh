#pragma once
// Decode attention on tensor cores (fp16 / bf16, fp32 accumulation) over a paged or contiguous KV cache.
//
// One thread block owns block_m packed rows of one (sequence, KV head): the query heads that share the KV
// head times the call's query tokens, so each K/V byte is read once per KV head whatever the GQA group.
// It streams its split's keys (decode_block.cuh) through `stages` shared-memory buffers by cp.async, each
// 16-byte chunk addressed through the block table (kv_pages.cuh), the page ids of the next tile read while
// the current one computes. Warps form row groups x key groups (mma_decode_shape.cuh); per tile a warp runs
// mma.sync m16n8k16 on its 16 rows and its share of the keys, FlashAttention-2's online softmax in
// registers, and P V from the repacked accumulators. At the end the key groups' states merge through shared
// memory into the normalized output and lse, or with several splits into the split's fp32 partial result
// for decode_combine.cuh.
#include "flashrtc/cp_async.cuh"
#include "flashrtc/decode_block.cuh"
#include "flashrtc/decode_params.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/forward_epilogue.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/kv_pages.cuh"
#include "flashrtc/mma.cuh"
#include "flashrtc/mma_decode_shape.cuh"
#include "flashrtc/online_softmax.cuh"

namespace flashrtc {

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask>
__global__ void __launch_bounds__(kWarps * 32) attention_decode_mma(const kernel::DecodeParams p) {
  static_assert(sizeof(T) == 2, "the tensor-core kernel takes 16-bit inputs");
  static_assert(kMask != kernel::Mask::kCausalTopLeft, "a KV cache's causal mask is bottom-right");
  constexpr MmaDecodeShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the tensor-core decode kernel");
  constexpr int kThreads = kShape.threads();
  constexpr int kChunks = kShape.chunks();
  constexpr int kPitch = kShape.pitch_chunks();
  constexpr bool kSwizzle = kShape.swizzled();
  constexpr int kRowGroups = kShape.row_groups();
  constexpr int kWarpKeys = kShape.warp_keys();
  constexpr int kNT = kWarpKeys / 8;                  // 8-column tiles of a warp's S
  constexpr int kDT = kShape.head_dim_padded() / 8;   // 8-column tiles of O
  constexpr int kKS = kShape.head_dim_padded() / 16;  // k-steps of Q K^T
  constexpr int kPS = kWarpKeys / 16;                 // k-steps of P V
  constexpr bool kQInRegs = kShape.q_in_registers();
  // Each K/V row is copied by kLoadSlots threads (its chunks rounded up to a power of two, the extra slots
  // idle), kRowStep rows at a time, kRowPasses times per tile.
  constexpr int kLoadSlots = kChunks <= 4 ? 4 : kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
  constexpr int kRowStep = kThreads / kLoadSlots;
  constexpr int kRowPasses = (kBlockN + kRowStep - 1) / kRowStep;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  const unsigned q_base = smem_address(smem_raw);
  const unsigned k_base = q_base + kShape.q_smem_bytes();
  const unsigned v_base = k_base + kStages * kShape.kv_stage_bytes();
  unsigned char* hidden = smem_raw + kShape.q_smem_bytes() + 2 * kStages * kShape.kv_stage_bytes();
  auto offset = [](int row, int chunk) -> unsigned {
    return unsigned(row * kPitch + (kSwizzle ? (chunk ^ (row & 7)) : chunk)) * 16u;
  };

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int row_group = warp % kRowGroups;
  const int key_group = warp / kRowGroups;

  const DecodeBlock blk = decode_block<kBlockN>(p, blockIdx.x);
  const int row0 = blk.m_block * kBlockM;
  const int num_tiles = (blk.key_end - blk.key_begin + kBlockN - 1) / kBlockN;
  const T* k_cache = static_cast<const T*>(p.k_cache.data);
  const T* v_cache = static_cast<const T*>(p.v_cache.data);

  // The rows' tokens, for the causal mask: this lane's rows are row_group * 16 + lane / 4 + {0, 8}.
  int last_key[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + row_group * 16 + lane / 4 + 8 * h;
    last_key[h] = r / p.kv_group + blk.length - p.seqlen_q;
  }
  // Keys past the block's first row's last visible key need the causal mask.
  const int causal_from = row0 / p.kv_group + blk.length - p.seqlen_q + 1;

  if (num_tiles > 0) {
    // Q rows, zero past p.rows.
    for (int c = tid; c < kBlockM * kChunks; c += kThreads) {
      const int r = c / kChunks;
      const int chunk = c % kChunks;
      const bool valid = row0 + r < p.rows && chunk * 8 < kHeadDim;
      const T* src = static_cast<const T*>(p.q);
      if (valid) src += decode_q_offset(p, blk, decode_row(p, blk, row0 + r)) + chunk * 8;
      cp_async_16(q_base + offset(r, chunk), src, valid);
    }
  }

  const int load_row = tid / kLoadSlots;
  const int load_chunk = tid % kLoadSlots;
  const bool chunk_copies = load_chunk < kChunks;
  const bool chunk_valid = load_chunk * 8 < kHeadDim;
  int page[kRowPasses];
  // Page ids of tile t's rows of this thread; whether one of its keys lies on a page outside the cache.
  auto lookup = [&](int t) -> bool {
    const int n0 = blk.key_begin + t * kBlockN;
    bool outside = false;
#pragma unroll
    for (int i = 0; i < kRowPasses; ++i) {
      const int rr = load_row + i * kRowStep;
      const int j = n0 + rr;
      page[i] = -1;
      if (rr < kBlockN && j < blk.key_end) {
        page[i] = kv_page(p.pages, blk.batch, j);
        outside |= page[i] < 0;
      }
    }
    return outside;
  };
  auto issue = [&](int t, bool any_hidden) {
    const int stage = t % kStages;
    const int n0 = blk.key_begin + t * kBlockN;
    const unsigned k_stage = k_base + stage * kShape.kv_stage_bytes();
    const unsigned v_stage = v_base + stage * kShape.kv_stage_bytes();
#pragma unroll
    for (int i = 0; i < kRowPasses; ++i) {
      const int rr = load_row + i * kRowStep;
      if (kBlockN % kRowStep != 0 && rr >= kBlockN) break;
      if (chunk_copies) {
        const bool valid = page[i] >= 0 && chunk_valid;
        const T* k_src = k_cache;
        const T* v_src = v_cache;
        if (valid) {
          k_src += kv_offset(p.k_cache, p.pages, page[i], n0 + rr, blk.kv_head) + load_chunk * 8;
          v_src += kv_offset(p.v_cache, p.pages, page[i], n0 + rr, blk.kv_head) + load_chunk * 8;
        }
        cp_async_16(k_stage + offset(rr, load_chunk), k_src, valid);
        cp_async_16(v_stage + offset(rr, load_chunk), v_src, valid);
      }
      if (any_hidden && load_chunk == 0) hidden[stage * kBlockN + rr] = page[i] < 0 ? 1 : 0;
    }
  };

  // Tile t's keys include a page outside the cache: bit t % 32 (at most kStages tiles are in flight).
  unsigned hidden_tiles = 0;
  auto note_hidden = [&](int t, bool any_hidden) {
    const unsigned bit = 1u << (t & 31);
    hidden_tiles = any_hidden ? (hidden_tiles | bit) : (hidden_tiles & ~bit);
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < num_tiles) {
      const bool any_hidden = __syncthreads_or(lookup(t));
      note_hidden(t, any_hidden);
      issue(t, any_hidden);
    }
    cp_async_commit();
  }
  bool next_hidden = kStages - 1 < num_tiles ? lookup(kStages - 1) : false;

  // ldmatrix lane addresses as in attention_forward_mma.cuh: Q (A), K (B of Q K^T), V (B of P V, .trans).
  auto ld_address = [](unsigned lane_base, int r0, int step) -> unsigned {
    if constexpr (kSwizzle)
      return (lane_base ^ unsigned((step % 4) * 32)) + unsigned(r0 * kPitch * 16 + (step / 4) * 128);
    else
      return lane_base + unsigned(r0 * kPitch * 16 + step * 32);
  };
  const unsigned q_lane = q_base + offset(lane % 16, lane / 16);
  const unsigned k_lane = k_base + offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const unsigned v_lane = v_base + offset(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
  const int warp_row0 = row_group * 16;
  const int warp_key0 = key_group * kWarpKeys;

  float acc_o[kDT][4];
  float m_run[2] = {negative_infinity(), negative_infinity()};
  float l_run[2] = {0.f, 0.f};
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_o[dt][e] = 0.f;
  unsigned q_frag[kQInRegs ? kKS : 1][4];

  for (int n = 0; n < num_tiles; ++n) {
    cp_async_wait<kStages - 2>();
    // Tile n has landed for every thread, every warp is done with tile n - 1: its buffers can refill.
    const bool any_hidden = __syncthreads_or(next_hidden);
    const int next = n + kStages - 1;
    if (next < num_tiles) {
      note_hidden(next, any_hidden);
      issue(next, any_hidden);
    }
    cp_async_commit();
    // The page ids of the tile after that, read while this one computes.
    if (next + 1 < num_tiles) next_hidden = lookup(next + 1);

    if constexpr (kQInRegs) {
      if (n == 0) {
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) ldmatrix_x4(q_frag[ks], ld_address(q_lane, warp_row0, ks));
      }
    }
    const int stage = n % kStages;
    const unsigned k_lane_stage = k_lane + stage * kShape.kv_stage_bytes();
    const unsigned v_lane_stage = v_lane + stage * kShape.kv_stage_bytes();
    const int n0 = blk.key_begin + n * kBlockN;

    float acc_s[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      unsigned a[4];
      if constexpr (kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = q_frag[ks][e];
      } else {
        ldmatrix_x4(a, ld_address(q_lane, warp_row0, ks));
      }
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        unsigned b[4];
        ldmatrix_x4(b, ld_address(k_lane_stage, warp_key0 + 16 * np, ks));
        mma_16816<T>(acc_s[2 * np], a, b[0], b[1]);
        mma_16816<T>(acc_s[2 * np + 1], a, b[2], b[3]);
      }
    }

    // Scale first, then mask: a negative scale must not turn a masked -inf into +inf.
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[nt][e] *= p.scale_log2;
    const bool tile_hidden = (hidden_tiles >> (n & 31)) & 1u;
    const bool causal_edge = kMask == kernel::Mask::kCausalBottomRight && n0 + kBlockN > causal_from;
    if (n0 + kBlockN > blk.key_end || causal_edge || tile_hidden) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int col = warp_key0 + nt * 8 + 2 * (lane % 4) + i;
          const int key = n0 + col;
          const bool gone = key >= blk.key_end || (tile_hidden && hidden[stage * kBlockN + col] != 0);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const bool causal_hidden = kMask == kernel::Mask::kCausalBottomRight && key > last_key[h];
            if (gone || causal_hidden) acc_s[nt][2 * h + i] = negative_infinity();
          }
        }
    }

    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      alpha[h] = online_softmax_step<4, 2 * kNT>(m_run[h], l_run[h],
                                                 [&](int j) -> float& { return acc_s[j / 2][2 * h + j % 2]; })
                     .alpha;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[dt][e] *= alpha[e / 2];

#pragma unroll
    for (int ps = 0; ps < kPS; ++ps) {
      unsigned a[4];
      a[0] = pack2<T>(acc_s[2 * ps][0], acc_s[2 * ps][1]);
      a[1] = pack2<T>(acc_s[2 * ps][2], acc_s[2 * ps][3]);
      a[2] = pack2<T>(acc_s[2 * ps + 1][0], acc_s[2 * ps + 1][1]);
      a[3] = pack2<T>(acc_s[2 * ps + 1][2], acc_s[2 * ps + 1][3]);
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        unsigned b[4];
        ldmatrix_x4_trans(b, ld_address(v_lane_stage, warp_key0 + 16 * ps, dp));
        mma_16816<T>(acc_o[2 * dp], a, b[0], b[1]);
        mma_16816<T>(acc_o[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the pipeline's buffers: they take the merge
#if __CUDA_ARCH__ >= 900
  // The combine may be scheduled now; it waits for this grid's writes before reading them.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

  // Each warp's unnormalized O, row max and row sum, then the key groups of each row merged.
  float* merge = reinterpret_cast<float*>(smem_raw);
  constexpr int kMergePitch = kShape.merge_pitch();
  float* mine = merge + warp * kShape.merge_warp_floats();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = lane / 4 + 8 * h;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
      *reinterpret_cast<float2*>(mine + r * kMergePitch + dt * 8 + 2 * (lane % 4)) =
          make_float2(acc_o[dt][2 * h], acc_o[dt][2 * h + 1]);
    const float l = row_lanes_sum<4>(l_run[h]);
    if (lane % 4 == 0) {
      mine[16 * kMergePitch + r] = m_run[h];
      mine[16 * kMergePitch + 16 + r] = l;
    }
  }
  __syncthreads();

  constexpr int kQuads = kShape.head_dim_padded() / 4;  // 4-column pieces of a row
  constexpr int kKeyGroups = kShape.key_groups();
  const bool partial = p.num_splits > 1;
  for (int c = tid; c < kBlockM * kQuads; c += kThreads) {
    const int r = c / kQuads;
    const int col = (c % kQuads) * 4;
    if (row0 + r >= p.rows || col >= kHeadDim) continue;
    const int group = r / 16;
    const int rr = r % 16;
    float m_max = negative_infinity();
#pragma unroll
    for (int kg = 0; kg < kKeyGroups; ++kg) {
      const float* w = merge + (group + kg * kRowGroups) * kShape.merge_warp_floats();
      m_max = fmaxf(m_max, w[16 * kMergePitch + rr]);
    }
    const float m_use = m_max == negative_infinity() ? 0.f : m_max;
    float l = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int kg = 0; kg < kKeyGroups; ++kg) {
      const float* w = merge + (group + kg * kRowGroups) * kShape.merge_warp_floats();
      const float scale = fast_exp2(w[16 * kMergePitch + rr] - m_use);
      l += w[16 * kMergePitch + 16 + rr] * scale;
      const float4 part = *reinterpret_cast<const float4*>(w + rr * kMergePitch + col);
      o.x += part.x * scale, o.y += part.y * scale, o.z += part.z * scale, o.w += part.w * scale;
    }
    const float inv_l = inverse_row_sum(l);
    o.x *= inv_l, o.y *= inv_l, o.z *= inv_l, o.w *= inv_l;
    const float lse = row_lse(m_max, l);
    const DecodeRow row = decode_row(p, blk, row0 + r);
    if (partial) {
      const long long index = decode_partial_index(p, blk.split, row);
      *reinterpret_cast<float4*>(p.o_partial + index * kHeadDim + col) = o;
      if (col == 0) p.lse_partial[index] = lse;
    } else {
      T* out = static_cast<T*>(p.o) + decode_o_offset(p, blk, row) + col;
      uint2 packed;
      packed.x = pack2<T>(o.x, o.y);
      packed.y = pack2<T>(o.z, o.w);
      *reinterpret_cast<uint2*>(out) = packed;
      if (col == 0 && p.lse != nullptr) p.lse[row.stat] = lse;
    }
  }
}

}  // namespace flashrtc

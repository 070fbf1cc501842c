#pragma once
// Decode attention on CUDA cores over a paged or contiguous KV cache, every element type (fp32 arithmetic):
// the portable decode kernel, and fp32's.
//
// One thread block owns block_m packed rows of one (sequence, KV head) (decode_block.cuh), so each K/V byte
// is read once per KV head whatever the GQA group. Groups of row_lanes() lanes span a head-dim row
// (simt_decode_shape.cuh); each lane keeps its slice of q for every row of the block in registers, and each
// group takes keys_per_thread() keys of every key tile straight from global memory (addressed through the
// block table, kv_pages.cuh), the next tile's loads in flight while this one computes when stages is 2. Per
// key, the lanes' partial dot products meet by shuffles; per tile, each row's online softmax (exp2, fp32)
// and O += P V. At the end the groups' states merge through shared memory into the normalized output and
// lse, or with several splits into the split's fp32 partial result for decode_combine.cuh.
#include "flashrtc/decode_block.cuh"
#include "flashrtc/decode_params.cuh"
#include "flashrtc/element_convert.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/forward_epilogue.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/kv_pages.cuh"
#include "flashrtc/online_softmax.cuh"
#include "flashrtc/simt_decode_shape.cuh"

namespace flashrtc {

// Four consecutive elements as one load: 16 bytes of fp32, 8 of a 16-bit type.
template <typename T>
struct DecodeVec4 {
  using Raw = uint2;
  static __device__ __forceinline__ Raw load(const T* ptr) { return *reinterpret_cast<const uint2*>(ptr); }
  static __device__ __forceinline__ Raw zero() { return make_uint2(0u, 0u); }
  static __device__ __forceinline__ void unpack(const Raw& x, float (&out)[4]) {
    out[0] = to_float(T{static_cast<unsigned short>(x.x & 0xffffu)});
    out[1] = to_float(T{static_cast<unsigned short>(x.x >> 16)});
    out[2] = to_float(T{static_cast<unsigned short>(x.y & 0xffffu)});
    out[3] = to_float(T{static_cast<unsigned short>(x.y >> 16)});
  }
  static __device__ __forceinline__ void store(T* ptr, const float (&in)[4]) {
    uint2 x;
    x.x = unsigned(from_float<T>(in[0]).bits) | (unsigned(from_float<T>(in[1]).bits) << 16);
    x.y = unsigned(from_float<T>(in[2]).bits) | (unsigned(from_float<T>(in[3]).bits) << 16);
    *reinterpret_cast<uint2*>(ptr) = x;
  }
};

template <>
struct DecodeVec4<float> {
  using Raw = float4;
  static __device__ __forceinline__ Raw load(const float* ptr) {
    return *reinterpret_cast<const float4*>(ptr);
  }
  static __device__ __forceinline__ Raw zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
  static __device__ __forceinline__ void unpack(const Raw& x, float (&out)[4]) {
    out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w;
  }
  static __device__ __forceinline__ void store(float* ptr, const float (&in)[4]) {
    *reinterpret_cast<float4*>(ptr) = make_float4(in[0], in[1], in[2], in[3]);
  }
};

template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, kernel::Mask kMask>
__global__ void __launch_bounds__(kWarps * 32) attention_decode_simt(const kernel::DecodeParams p) {
  static_assert(kMask != kernel::Mask::kCausalTopLeft, "a KV cache's causal mask is bottom-right");
  constexpr SimtDecodeShape kShape{kHeadDim, kBlockM, kBlockN, kWarps, kStages};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the SIMT decode kernel");
  constexpr int kThreads = kShape.threads();
  constexpr int kLanes = kShape.row_lanes();
  constexpr int kVecs = kShape.vectors();
  constexpr int kChunks = kShape.chunks();
  constexpr int kGroups = kShape.key_groups();
  constexpr int kKeys = kShape.keys_per_thread();
  constexpr int kDims = 4 * kVecs;  // of a row, per thread
  using Vec = DecodeVec4<T>;
  using Raw = typename Vec::Raw;

  extern __shared__ __align__(16) unsigned char smem_raw[];

  const int tid = threadIdx.x;
  const int lane = tid % kLanes;  // lanes of a group are adjacent in a warp: row sums are xor shuffles
  const int group = tid / kLanes;

  const DecodeBlock blk = decode_block<kBlockN>(p, blockIdx.x);
  const int row0 = blk.m_block * kBlockM;
  // Rows of the block below p.rows (at least one: the grid has no empty row block). Uniform over the block,
  // so branching on it keeps every shuffle's lanes together.
  const int live = min(kBlockM, p.rows - row0);

  // Vector v of this lane is the row's chunk v * kLanes + lane (adjacent lanes, adjacent addresses).
  bool chunk_ok[kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) chunk_ok[v] = v * kLanes + lane < kChunks;

  // Causal: the last key each row sees; keys past the block's last row's last one are hidden from all rows.
  int last_key[kBlockM];
#pragma unroll
  for (int r = 0; r < kBlockM; ++r)
    last_key[r] = decode_last_visible_key(p, blk, decode_row(p, blk, row0 + r));
  int key_stop = blk.key_end;
  if (kMask == kernel::Mask::kCausalBottomRight) {
    const int last = decode_last_visible_key(p, blk, decode_row(p, blk, row0 + live - 1)) + 1;
    key_stop = last < key_stop ? last : key_stop;
  }
  const int num_tiles = key_stop > blk.key_begin ? (key_stop - blk.key_begin + kBlockN - 1) / kBlockN : 0;

  float q[kBlockM][kDims];
#pragma unroll
  for (int r = 0; r < kBlockM; ++r)
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      float x[4] = {0.f, 0.f, 0.f, 0.f};
      if (r < live && chunk_ok[v]) {
        const T* src = static_cast<const T*>(p.q) + decode_q_offset(p, blk, decode_row(p, blk, row0 + r)) +
                       (v * kLanes + lane) * 4;
        Vec::unpack(Vec::load(src), x);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) q[r][4 * v + e] = x[e];
    }

  const T* k_cache = static_cast<const T*>(p.k_cache.data);
  const T* v_cache = static_cast<const T*>(p.v_cache.data);
  // This thread's keys of tile t: key_begin + t * kBlockN + group + k * kGroups. A key past key_stop or on a
  // page outside the cache is not read: its vectors stay zero and its score is masked.
  auto load = [&](int t, Raw(&kb)[kKeys][kVecs], Raw(&vb)[kKeys][kVecs], bool(&seen)[kKeys]) {
    const int n0 = blk.key_begin + t * kBlockN;
#pragma unroll
    for (int k = 0; k < kKeys; ++k) {
      const int j = n0 + group + k * kGroups;
      const int page = j < key_stop ? kv_page(p.pages, blk.batch, j) : -1;
      seen[k] = page >= 0;
      const T* k_row = k_cache;
      const T* v_row = v_cache;
      if (seen[k]) {
        k_row += kv_offset(p.k_cache, p.pages, page, j, blk.kv_head);
        v_row += kv_offset(p.v_cache, p.pages, page, j, blk.kv_head);
      }
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        const bool read = seen[k] && chunk_ok[v];
        const int col = (v * kLanes + lane) * 4;
        kb[k][v] = read ? Vec::load(k_row + col) : Vec::zero();
        vb[k][v] = read ? Vec::load(v_row + col) : Vec::zero();
      }
    }
  };

  float o[kBlockM][kDims];
  float m_run[kBlockM], l_run[kBlockM];
#pragma unroll
  for (int r = 0; r < kBlockM; ++r) {
    m_run[r] = negative_infinity();
    l_run[r] = 0.f;
#pragma unroll
    for (int d = 0; d < kDims; ++d) o[r][d] = 0.f;
  }

  auto compute = [&](int t, const Raw(&kb)[kKeys][kVecs], const Raw(&vb)[kKeys][kVecs],
                     const bool(&seen)[kKeys]) {
    const int n0 = blk.key_begin + t * kBlockN;
    float s[kBlockM][kKeys];
#pragma unroll
    for (int k = 0; k < kKeys; ++k) {
      float kf[kDims];
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        float x[4];
        Vec::unpack(kb[k][v], x);
#pragma unroll
        for (int e = 0; e < 4; ++e) kf[4 * v + e] = x[e];
      }
#pragma unroll
      for (int r = 0; r < kBlockM; ++r) {
        float acc = 0.f;
#pragma unroll
        for (int d = 0; d < kDims; ++d) acc = fmaf(q[r][d], kf[d], acc);
        s[r][k] = acc;
      }
    }
#pragma unroll
    for (int r = 0; r < kBlockM; ++r) {
      if (r >= live) break;
#pragma unroll
      for (int k = 0; k < kKeys; ++k) {
        // Scale first, then mask: a negative scale must not turn a masked -inf into +inf.
        const float x = row_lanes_sum<kLanes>(s[r][k]) * p.scale_log2;
        const bool causal_hidden =
            kMask == kernel::Mask::kCausalBottomRight && n0 + group + k * kGroups > last_key[r];
        s[r][k] = (!seen[k] || causal_hidden) ? negative_infinity() : x;
      }
      const float alpha =
          online_softmax_step<1, kKeys>(m_run[r], l_run[r], [&](int j) -> float& { return s[r][j]; }).alpha;
#pragma unroll
      for (int d = 0; d < kDims; ++d) o[r][d] *= alpha;
    }
#pragma unroll
    for (int k = 0; k < kKeys; ++k) {
      float vf[kDims];
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        float x[4];
        Vec::unpack(vb[k][v], x);
#pragma unroll
        for (int e = 0; e < 4; ++e) vf[4 * v + e] = x[e];
      }
#pragma unroll
      for (int r = 0; r < kBlockM; ++r) {
        if (r >= live) break;
#pragma unroll
        for (int d = 0; d < kDims; ++d) o[r][d] = fmaf(s[r][k], vf[d], o[r][d]);
      }
    }
  };

  Raw kb[kKeys][kVecs], vb[kKeys][kVecs];
  bool seen[kKeys];
  if (num_tiles > 0) load(0, kb, vb, seen);
  for (int t = 0; t < num_tiles; ++t) {
    if constexpr (kStages == 2) {
      Raw kb_next[kKeys][kVecs], vb_next[kKeys][kVecs];
      bool seen_next[kKeys];
      if (t + 1 < num_tiles) load(t + 1, kb_next, vb_next, seen_next);
      compute(t, kb, vb, seen);
#pragma unroll
      for (int k = 0; k < kKeys; ++k) {
        seen[k] = seen_next[k];
#pragma unroll
        for (int v = 0; v < kVecs; ++v) kb[k][v] = kb_next[k][v], vb[k][v] = vb_next[k][v];
      }
    } else {
      compute(t, kb, vb, seen);
      if (t + 1 < num_tiles) load(t + 1, kb, vb, seen);
    }
  }

  // Each group's unnormalized O, row max and row sum; then each row's groups merged.
  float* merge_o = reinterpret_cast<float*>(smem_raw);      // [group][row][head_dim]
  float* merge_m = merge_o + kGroups * kBlockM * kHeadDim;  // [group][row]
  float* merge_l = merge_m + kGroups * kBlockM;
#pragma unroll
  for (int r = 0; r < kBlockM; ++r) {
    if (r >= live) break;
    float* mine = merge_o + (group * kBlockM + r) * kHeadDim;
#pragma unroll
    for (int v = 0; v < kVecs; ++v)
      if (chunk_ok[v])
        *reinterpret_cast<float4*>(mine + (v * kLanes + lane) * 4) =
            make_float4(o[r][4 * v], o[r][4 * v + 1], o[r][4 * v + 2], o[r][4 * v + 3]);
    if (lane == 0) {
      merge_m[group * kBlockM + r] = m_run[r];
      merge_l[group * kBlockM + r] = l_run[r];
    }
  }
  __syncthreads();

  const bool partial = p.num_splits > 1;
  for (int c = tid; c < live * kChunks; c += kThreads) {
    const int r = c / kChunks;
    const int col = (c % kChunks) * 4;
    float m_max = negative_infinity();
    for (int g = 0; g < kGroups; ++g) m_max = fmaxf(m_max, merge_m[g * kBlockM + r]);
    const float m_use = m_max == negative_infinity() ? 0.f : m_max;
    float l = 0.f;
    float out[4] = {0.f, 0.f, 0.f, 0.f};
    for (int g = 0; g < kGroups; ++g) {
      const float scale = fast_exp2(merge_m[g * kBlockM + r] - m_use);
      l += merge_l[g * kBlockM + r] * scale;
      const float4 part = *reinterpret_cast<const float4*>(merge_o + (g * kBlockM + r) * kHeadDim + col);
      out[0] += part.x * scale, out[1] += part.y * scale, out[2] += part.z * scale, out[3] += part.w * scale;
    }
    const float inv_l = inverse_row_sum(l);
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] *= inv_l;
    const float lse = row_lse(m_max, l);
    const DecodeRow row = decode_row(p, blk, row0 + r);
    if (partial) {
      const long long index = decode_partial_index(p, blk.split, row);
      DecodeVec4<float>::store(p.o_partial + index * kHeadDim + col, out);
      if (col == 0) p.lse_partial[index] = lse;
    } else {
      Vec::store(static_cast<T*>(p.o) + decode_o_offset(p, blk, row) + col, out);
      if (col == 0 && p.lse != nullptr) p.lse[row.stat] = lse;
    }
  }
}

}  // namespace flashrtc

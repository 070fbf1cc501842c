#pragma once
// What one thread block of a forward kernel owns, shared by every kernel family: its (batch, head, query
// block), the base addresses of its Q, K, V, O and lse rows, and the key blocks it visits.
#include "flashrtc/block_ranges.cuh"
#include "flashrtc/forward_params.cuh"

namespace flashrtc {

template <typename T, int kBlockM, int kBlockN, kernel::Mask kMask>
struct ForwardBlock {
  static constexpr bool kCausal = kMask != kernel::Mask::kNone;
  long long m0;       // first query row
  long long diag;     // key j is visible to query i iff j <= i + diag (causal masks only)
  int num_n_blocks;   // key blocks to visit; 0 when every row of the block is fully masked
  const T* q;
  const T* k;
  const T* v;
  T* o;
  float* lse;         // this (batch, head)'s lse row, or null
  int batch, head, kv_head;

  // Work tile `tile` of p.num_blocks; `chunks`: in p.causal_chunk's order (a constant at each call: the kernels
  // that never take chunks compile none of it).
  __device__ __forceinline__ ForwardBlock(const kernel::ForwardParams& p, int tile, bool chunks = false) {
    // Unsigned, as blockIdx.x is: cheaper than signed division, and the registers of the kernels at the margin.
    int m_block = static_cast<unsigned>(tile) % p.num_m_blocks;
    int bh = static_cast<unsigned>(tile) / p.num_m_blocks;
    // Under a causal mask later query blocks see more keys: they start first, so that the grid ends on short
    // tiles. With p.causal_chunk > 1 across the chunk's (batch, head) pairs: the last chunk's shortest tiles
    // end the grid, while the chunk's K and V stay in L2. One pair at a time takes the cheaper arithmetic (its
    // two extra divisions cost 2% at 512 keys on an H200).
    if (kCausal && (!chunks || p.causal_chunk == 1)) {
      m_block = p.num_m_blocks - 1 - m_block;
    } else if (kCausal) {
      const unsigned per_chunk = static_cast<unsigned>(p.causal_chunk) * p.num_m_blocks;
      const unsigned chunk = static_cast<unsigned>(tile) / per_chunk;
      const unsigned in_chunk = static_cast<unsigned>(tile) - chunk * per_chunk;
      const unsigned first_pair = chunk * p.causal_chunk;
      const unsigned pairs = min(static_cast<unsigned>(p.causal_chunk),
                                 static_cast<unsigned>(p.num_blocks) / p.num_m_blocks - first_pair);
      const unsigned m_from_last = in_chunk / pairs;
      bh = static_cast<int>(first_pair + (in_chunk - m_from_last * pairs));
      m_block = p.num_m_blocks - 1 - static_cast<int>(m_from_last);
    }
    head = bh % p.heads_q;
    batch = bh / p.heads_q;
    m0 = static_cast<long long>(m_block) * kBlockM;
    kv_head = head / p.kv_group;

    q = static_cast<const T*>(p.q) + batch * p.q_stride_batch + head * p.q_stride_head;
    k = static_cast<const T*>(p.k) + batch * p.k_stride_batch + kv_head * p.k_stride_head;
    v = static_cast<const T*>(p.v) + batch * p.v_stride_batch + kv_head * p.v_stride_head;
    o = static_cast<T*>(p.o) + batch * p.o_stride_batch + head * p.o_stride_head;
    lse = p.lse ? p.lse + (static_cast<long long>(batch) * p.heads_q + head) * p.seqlen_q : nullptr;

    diag = mask_diag<kMask>(p.seqlen_q, p.seqlen_kv);
    num_n_blocks = key_blocks(p, m0 + kBlockM);
  }
  // Key blocks the query rows before row_end see (the first key blocks: a causal mask hides the later ones).
  __device__ __forceinline__ int key_blocks(const kernel::ForwardParams& p, long long row_end) const {
    return key_blocks_seen<kBlockN, kMask>(row_end, diag, p.seqlen_kv);
  }
  // Moves the block onto one sequence of a packed call (the variable-length forward, p its parameters with
  // batch strides 0): the sequence's first query and key are rows first_q and first_k, its lengths seqlen_q
  // and seqlen_kv, and lse is [heads_q, lse_stride_head]. The block's batch is the sequence's index.
  __device__ __forceinline__ void bind_sequence(const kernel::ForwardParams& p, int first_q, int first_k,
                                                int seqlen_q, int seqlen_kv, int lse_stride_head) {
    q += static_cast<long long>(first_q) * p.q_stride_seq;
    k += static_cast<long long>(first_k) * p.k_stride_seq;
    v += static_cast<long long>(first_k) * p.v_stride_seq;
    o += static_cast<long long>(first_q) * p.o_stride_seq;
    lse = p.lse ? p.lse + static_cast<long long>(head) * lse_stride_head + first_q : nullptr;
    diag = mask_diag<kMask>(seqlen_q, seqlen_kv);
    num_n_blocks = key_blocks_seen<kBlockN, kMask>(m0 + kBlockM, diag, seqlen_kv);
  }
  // The lengths that bound the block's query rows and keys: the call's (a VarlenForwardBlock's: its
  // sequence's, varlen_sequence.cuh).
  __device__ __forceinline__ int seqlen_q(const kernel::ForwardParams& p) const { return p.seqlen_q; }
  __device__ __forceinline__ int seqlen_kv(const kernel::ForwardParams& p) const { return p.seqlen_kv; }
  // One thread block per work tile.
  __device__ __forceinline__ explicit ForwardBlock(const kernel::ForwardParams& p) : ForwardBlock(p, blockIdx.x) {}
};

}  // namespace flashrtc

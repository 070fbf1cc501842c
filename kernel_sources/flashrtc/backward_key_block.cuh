#pragma once
// The walk of a Hopper backward block (one block_n slice of keys of one (batch, kv head)) over the (query
// head, query block) pairs that see its keys: shared by the kernels of attention_backward_wgmma.cuh and
// attention_backward_wgmma_split.cuh, whose producer, dQ writer and consumers all walk it in the same order.
#include "flashrtc/backward_params.cuh"
#include "flashrtc/block_ranges.cuh"
#include "flashrtc/mask.cuh"

namespace flashrtc {

// The block's keys and the (query head, query block) pairs that see any of them: query heads of the kv head's
// group outer, query blocks inner. Each warp group builds its own copy after its register change, so nothing
// computed here stays live in the producer's small budget.
template <int kBlockM, int kBlockN, kernel::Mask kMask>
struct BackwardKeyBlock {
  int kv_head, batch, n0;
  int m_begin, num_m_blocks;  // the query blocks visited per head
  int total;                  // pairs
  long long diag;             // KeyMask's

  __device__ __forceinline__ explicit BackwardKeyBlock(const kernel::BackwardParams& p)
      : BackwardKeyBlock(p, p.seqlen_q, p.seqlen_kv) {}
  // Over lengths of its own: a packed call's sequence's (VarlenBackwardKeyBlock, varlen_sequence.cuh).
  __device__ __forceinline__ BackwardKeyBlock(const kernel::BackwardParams& p, int seqlen_q, int seqlen_kv) {
    const int bh = blockIdx.x / p.num_blocks;
    kv_head = bh % p.heads_kv;
    batch = bh / p.heads_kv;
    n0 = (blockIdx.x % p.num_blocks) * kBlockN;
    diag = mask_diag<kMask>(seqlen_q, seqlen_kv);
    const BlockRange m_blocks = query_blocks_seeing<kBlockM, kMask>(n0, diag, seqlen_q);
    m_begin = m_blocks.begin;
    num_m_blocks = m_blocks.end;
    total = (num_m_blocks - m_begin) * p.kv_group;
  }

  // Calls f(head, m0, stage, phase) for every pair in order, with the ring position of `stages` buffers.
  template <int kStages, typename F>
  __device__ __forceinline__ void for_each_pair(const kernel::BackwardParams& p, F&& f) const {
    int stage = 0;
    unsigned phase = 0;
#pragma unroll 1
    for (int head = kv_head * p.kv_group; head < (kv_head + 1) * p.kv_group; ++head)
#pragma unroll 1
      for (int m_block = m_begin; m_block < num_m_blocks; ++m_block) {
        f(head, m_block * kBlockM, stage, phase);
        if (++stage == kStages) stage = 0, phase ^= 1u;
      }
  }
};

}  // namespace flashrtc

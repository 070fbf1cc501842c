#pragma once
// Where one sequence of a packed (variable-length) call lies, read from the device arrays and bounded so that
// no value makes a kernel read or write outside the packed tensors (docs/varlen.md), and the forward kernels'
// parameter struct of either kind; the backward kernels' likewise.
#include "flashrtc/backward_key_block.cuh"
#include "flashrtc/backward_params.cuh"
#include "flashrtc/forward_block.cuh"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/varlen_bounds.cuh"

namespace flashrtc {

namespace kernel {

// The parameter struct of a forward kernel: the variable-length variant takes the packed call's.
template <bool kVarlen>
struct ForwardParamsOf {
  using type = ForwardParams;
};
template <>
struct ForwardParamsOf<true> {
  using type = VarlenForwardParams;
};

__device__ __forceinline__ const ForwardParams& dense_params(const ForwardParams& p) {
  return p;
}
__device__ __forceinline__ const ForwardParams& dense_params(const VarlenForwardParams& p) {
  return p.dense;
}
__device__ __forceinline__ const ForwardParams& dense_params(const VariantForwardParams& p) {
  return p.dense;
}

// The parameter struct of a backward kernel: the variable-length variant takes the packed call's.
template <bool kVarlen>
struct BackwardParamsOf {
  using type = BackwardParams;
};
template <>
struct BackwardParamsOf<true> {
  using type = VarlenBackwardParams;
};

__device__ __forceinline__ const BackwardParams& dense_params(const BackwardParams& p) {
  return p;
}
__device__ __forceinline__ const BackwardParams& dense_params(const VarlenBackwardParams& p) {
  return p.dense;
}

}  // namespace kernel

// Sequence b's bounds (varlen_bounds), read from the device arrays of a varlen forward's or backward's
// parameters (kernel::VarlenForwardParams, kernel::VarlenBackwardParams: the same fields).
template <typename VarlenParams>
__device__ __forceinline__ VarlenSequence varlen_sequence(const VarlenParams& p, int b) {
  return varlen_bounds(p.cu_seqlens_q[b], p.cu_seqlens_q[b + 1], p.cu_seqlens_k[b], p.cu_seqlens_k[b + 1],
                       p.seqused_k != nullptr, p.seqused_k ? p.seqused_k[b] : 0, p.total_q, p.total_k,
                       p.dense.seqlen_q);
}

// Moves block (made from p.dense: its batch is its sequence) onto its sequence, whose bounds it writes into
// seq. False when the block's first query row lies past the sequence's end: the block has nothing to do (the
// grid covers max_seqlen_q rows of every sequence).
template <typename T, int kBlockM, int kBlockN, kernel::Mask kMask>
__device__ __forceinline__ bool bind_varlen_sequence(const kernel::VarlenForwardParams& p,
                                                     ForwardBlock<T, kBlockM, kBlockN, kMask>& block,
                                                     VarlenSequence& seq) {
  seq = varlen_sequence(p, block.batch);
  if (block.m0 >= seq.seqlen_q) return false;
  block.bind_sequence(p.dense, seq.first_q, seq.first_k, seq.seqlen_q, seq.seqlen_kv, p.total_q);
  return true;
}

// A forward block of a packed call, moved onto its sequence where it is made, for the kernels that make their
// block anew where they use it (the Hopper forward's producer, consumers and epilogue) rather than hold its
// fields. live: whether the block's first query row lies within its sequence (bind_varlen_sequence).
template <typename T, int kBlockM, int kBlockN, kernel::Mask kMask>
struct VarlenForwardBlock : ForwardBlock<T, kBlockM, kBlockN, kMask> {
  VarlenSequence seq;
  bool live;
  __device__ __forceinline__ VarlenForwardBlock(const kernel::VarlenForwardParams& p, int tile, bool chunks)
      : ForwardBlock<T, kBlockM, kBlockN, kMask>(p.dense, tile, chunks) {
    live = bind_varlen_sequence(p, *this, seq);
  }
  __device__ __forceinline__ int seqlen_q(const kernel::VarlenForwardParams&) const { return seq.seqlen_q; }
  __device__ __forceinline__ int seqlen_kv(const kernel::VarlenForwardParams&) const { return seq.seqlen_kv; }
};

// The block type of a forward kernel: the variable-length variant's moves onto its sequence.
template <bool kVarlen, typename T, int kBlockM, int kBlockN, kernel::Mask kMask>
struct ForwardBlockOf {
  using type = ForwardBlock<T, kBlockM, kBlockN, kMask>;
};
template <typename T, int kBlockM, int kBlockN, kernel::Mask kMask>
struct ForwardBlockOf<true, T, kBlockM, kBlockN, kMask> {
  using type = VarlenForwardBlock<T, kBlockM, kBlockN, kMask>;
};

// A Hopper backward block of a packed call (BackwardKeyBlock over its sequence's lengths; its batch is its
// sequence). Keys the sequence owns past seqused_k are seen by no query: no pairs, their dK and dV are 0.
// live: whether the block's first key lies within the keys the sequence owns (key_rows).
template <int kBlockM, int kBlockN, kernel::Mask kMask>
struct VarlenBackwardKeyBlock : BackwardKeyBlock<kBlockM, kBlockN, kMask> {
  VarlenSequence seq;
  bool live;
  __device__ __forceinline__ explicit VarlenBackwardKeyBlock(const kernel::VarlenBackwardParams& p)
      : VarlenBackwardKeyBlock(
            p, varlen_sequence(p, static_cast<int>(blockIdx.x) / p.dense.num_blocks / p.dense.heads_kv)) {}
  __device__ __forceinline__ VarlenBackwardKeyBlock(const kernel::VarlenBackwardParams& p,
                                                    const VarlenSequence& s)
      : BackwardKeyBlock<kBlockM, kBlockN, kMask>(p.dense, s.seqlen_q, s.seqlen_kv), seq(s) {
    live = this->n0 < s.key_rows;
    if (this->n0 >= s.seqlen_kv) this->num_m_blocks = this->m_begin, this->total = 0;
  }
};

// The block type of a Hopper backward kernel: the variable-length variant's lies on its sequence.
template <bool kVarlen, int kBlockM, int kBlockN, kernel::Mask kMask>
struct BackwardKeyBlockOf {
  using type = BackwardKeyBlock<kBlockM, kBlockN, kMask>;
};
template <int kBlockM, int kBlockN, kernel::Mask kMask>
struct BackwardKeyBlockOf<true, kBlockM, kBlockN, kMask> {
  using type = VarlenBackwardKeyBlock<kBlockM, kBlockN, kMask>;
};

// The sequence as a dense problem of its own lengths, for the code that takes a whole ForwardParams.
__device__ __forceinline__ kernel::ForwardParams sequence_params(const kernel::ForwardParams& p,
                                                                 const VarlenSequence& seq) {
  kernel::ForwardParams s = p;
  s.seqlen_q = seq.seqlen_q;
  s.seqlen_kv = seq.seqlen_kv;
  return s;
}

}  // namespace flashrtc

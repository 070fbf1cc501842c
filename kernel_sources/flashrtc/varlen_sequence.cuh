#pragma once
// Where one sequence of a packed (variable-length) call lies, read from the device arrays and bounded so that
// no value makes a kernel read or write outside the packed tensors (docs/varlen.md), and the forward kernels'
// parameter struct of either kind.
#include "flashrtc/forward_block.cuh"
#include "flashrtc/forward_params.cuh"

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

}  // namespace kernel

struct VarlenSequence {
  int first_q, first_k;  // rows of the sequence's first query and key
  int seqlen_q;          // queries, at most max_seqlen_q (p.dense.seqlen_q): the grid has no block past it
  int seqlen_kv;         // keys, after seqused_k
};

__device__ __forceinline__ int clamp_to(int x, int lo, int hi) {
  return min(max(x, lo), hi);
}

// Sequence b's bounds: each prefix sum clamped to [0, total], each end to at least its start, seqused_k[b] to
// [0, the sequence's keys].
__device__ __forceinline__ VarlenSequence varlen_sequence(const kernel::VarlenForwardParams& p, int b) {
  VarlenSequence s;
  s.first_q = clamp_to(p.cu_seqlens_q[b], 0, p.total_q);
  s.first_k = clamp_to(p.cu_seqlens_k[b], 0, p.total_k);
  s.seqlen_q = min(clamp_to(p.cu_seqlens_q[b + 1], s.first_q, p.total_q) - s.first_q, p.dense.seqlen_q);
  s.seqlen_kv = clamp_to(p.cu_seqlens_k[b + 1], s.first_k, p.total_k) - s.first_k;
  if (p.seqused_k) s.seqlen_kv = clamp_to(p.seqused_k[b], 0, s.seqlen_kv);
  return s;
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

// The sequence as a dense problem of its own lengths, for the code that takes a whole ForwardParams.
__device__ __forceinline__ kernel::ForwardParams sequence_params(const kernel::ForwardParams& p,
                                                                 const VarlenSequence& seq) {
  kernel::ForwardParams s = p;
  s.seqlen_q = seq.seqlen_q;
  s.seqlen_kv = seq.seqlen_kv;
  return s;
}

}  // namespace flashrtc

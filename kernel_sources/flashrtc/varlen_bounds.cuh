#pragma once
// One sequence's bounds in a packed (variable-length) call from the values read from the device, bounded into
// the packed tensors whatever those values are (docs/varlen.md). Plain constexpr integer arithmetic, compiled
// by NVRTC and by the host compiler (tests/cpu/test_varlen_bounds.cpp checks it on hostile values).

namespace flashrtc {

struct VarlenSequence {
  int first_q, first_k;  // rows of the sequence's first query and key
  int seqlen_q;          // queries, at most max_seqlen_q: the grid has no block past it
  int seqlen_kv;         // keys, after seqused_k
  int key_rows;          // keys the sequence owns, before seqused_k: the rows its dK and dV cover
};

constexpr int clamp_to(int x, int lo, int hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

// cu_q0, cu_q1: cu_seqlens_q[b] and [b + 1]; cu_k0, cu_k1 likewise; used: seqused_k[b] where has_used. Each
// prefix sum is clamped to [0, total], each end to at least its start, used to [0, the sequence's keys], so
// [first, first + seqlen) lies within [0, total) for any values (and [first_k, first_k + key_rows)).
constexpr VarlenSequence varlen_bounds(int cu_q0, int cu_q1, int cu_k0, int cu_k1, bool has_used, int used,
                                       int total_q, int total_k, int max_seqlen_q) {
  const int first_q = clamp_to(cu_q0, 0, total_q);
  const int first_k = clamp_to(cu_k0, 0, total_k);
  const int seqlen_q = clamp_to(cu_q1, first_q, total_q) - first_q;
  const int key_rows = clamp_to(cu_k1, first_k, total_k) - first_k;
  const int seqlen_kv = has_used ? clamp_to(used, 0, key_rows) : key_rows;
  return {first_q, first_k, seqlen_q < max_seqlen_q ? seqlen_q : max_seqlen_q, seqlen_kv, key_rows};
}

}  // namespace flashrtc

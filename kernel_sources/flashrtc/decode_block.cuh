#pragma once
// The work of one thread block of a decode kernel, shared by every decode family: which (split, packed-row
// block, KV head, sequence) it owns, the keys of its split, and where each of its packed rows reads q and
// writes o, lse or the split's partial results.
#include "flashrtc/decode_params.cuh"
#include "flashrtc/kv_pages.cuh"

namespace flashrtc {

struct DecodeBlock {
  int split, m_block, kv_head, batch;
  int length;                // the sequence's keys (after the append)
  int key_begin, key_end;    // this split's keys: whole key tiles of kBlockN, the last one cut at length
};

// Block block_id of the 1-d grid, split fastest. A sequence's key tiles go to its splits in equal runs
// (ceil(tiles / num_splits) each), so the split count, not the lengths, fixes the grid: splits past a short
// sequence's keys get an empty range.
template <int kBlockN>
__device__ __forceinline__ DecodeBlock decode_block(const kernel::DecodeParams& p, int block_id) {
  DecodeBlock b;
  b.split = block_id % p.num_splits;
  block_id /= p.num_splits;
  b.m_block = block_id % p.num_m_blocks;
  block_id /= p.num_m_blocks;
  b.kv_head = block_id % p.heads_kv;
  b.batch = block_id / p.heads_kv;
  b.length = kv_length(p.lengths, b.batch);
  const int tiles = (b.length + kBlockN - 1) / kBlockN;
  const int run = (tiles + p.num_splits - 1) / p.num_splits;
  const long long begin = static_cast<long long>(b.split) * run * kBlockN;
  const long long end = begin + static_cast<long long>(run) * kBlockN;
  b.key_begin = begin < b.length ? static_cast<int>(begin) : b.length;
  b.key_end = end < b.length ? static_cast<int>(end) : b.length;
  return b;
}

// Packed row r of a (sequence, KV head): query token r / kv_group of query head kv_head * kv_group + r %
// kv_group.
struct DecodeRow {
  int token, head;
  long long stat;  // index into lse [batch, heads_q, seqlen_q]: (batch * heads_q + head) * seqlen_q + token
};

__device__ __forceinline__ DecodeRow decode_row(const kernel::DecodeParams& p, const DecodeBlock& b, int r) {
  DecodeRow row;
  row.token = r / p.kv_group;
  row.head = b.kv_head * p.kv_group + r % p.kv_group;
  row.stat = (static_cast<long long>(b.batch) * p.heads_q + row.head) * p.seqlen_q + row.token;
  return row;
}

__device__ __forceinline__ long long decode_q_offset(const kernel::DecodeParams& p, const DecodeBlock& b,
                                                     const DecodeRow& row) {
  return b.batch * p.q_stride_batch + row.token * p.q_stride_seq + row.head * p.q_stride_head;
}

__device__ __forceinline__ long long decode_o_offset(const kernel::DecodeParams& p, const DecodeBlock& b,
                                                     const DecodeRow& row) {
  return b.batch * p.o_stride_batch + row.token * p.o_stride_seq + row.head * p.o_stride_head;
}

// Index of a row's statistics in split s's partial results (its output row starts at that index * head_dim).
__device__ __forceinline__ long long decode_partial_index(const kernel::DecodeParams& p, int split,
                                                          const DecodeRow& row) {
  return static_cast<long long>(split) * p.batch * p.heads_q * p.seqlen_q + row.stat;
}

// Under kCausalBottomRight, the last key row r's token may see: token + length - seqlen_q (may be < 0: none).
__device__ __forceinline__ int decode_last_visible_key(const kernel::DecodeParams& p, const DecodeBlock& b,
                                                       const DecodeRow& row) {
  return row.token + b.length - p.seqlen_q;
}

}  // namespace flashrtc

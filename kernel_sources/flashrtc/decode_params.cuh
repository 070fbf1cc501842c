#pragma once
// Launch parameters of the KV-cache kernels: the append, the decode attention, the combine of its key splits
// and merge_states. Compiled by NVRTC and by the host compiler alike (the runtime includes this file), so
// each struct has one layout on both sides: fixed-width fields only.

namespace flashrtc {
namespace kernel {

// The most key splits a decode call may use: the combine keeps one weight per split per warp in shared memory.
constexpr int kMaxDecodeSplits = 256;

// Where a sequence's tokens live in a paged cache. A contiguous cache is the trivial table: one page per
// sequence (page_shift 31, so every token falls in page 0 of the sequence), page batch_idx[b] or b.
struct KvPages {
  const int* block_table;  // [batch, table_stride]; null: contiguous
  const int* batch_idx;    // contiguous only: the page of sequence b; null: b
  long long table_stride;  // elements between rows of block_table
  int page_shift;          // log2(page_size); 31 for a contiguous cache
  int num_pages;           // page ids outside [0, num_pages) hold nothing
};

// One cache tensor [num_pages, page_size, heads_kv, head_dim] by element strides.
struct KvTensor {
  void* data;
  long long stride_page, stride_seq, stride_head;
};

// The sequence lengths of a call: the cache's before the append (clamped to [0, capacity - seqlen_new]), or
// capacity for every sequence where cache_seqlens is null; plus seqlen_new.
struct KvLengths {
  const int* cache_seqlens;  // [batch] or null
  int capacity;              // tokens a sequence can hold
  int seqlen_new;            // tokens appended before attending
};

struct KvAppendParams {
  const void* k_new;
  const void* v_new;
  long long k_new_stride_batch, k_new_stride_seq, k_new_stride_head;
  long long v_new_stride_batch, v_new_stride_seq, v_new_stride_head;
  KvTensor k_cache, v_cache;
  KvPages pages;
  KvLengths lengths;
  int batch, heads_kv;
  int num_rows;  // batch * seqlen_new * heads_kv rows of head_dim elements
};

struct DecodeParams {
  const void* q;
  void* o;
  float* lse;  // [batch, heads_q, seqlen_q] or null
  // num_splits > 1: each split's normalized output [split, batch, heads_q, seqlen_q, head_dim] and natural-log
  // lse [split, batch, heads_q, seqlen_q] in fp32, for the combine kernel. Unused (null) with one split.
  float* o_partial;
  float* lse_partial;
  long long q_stride_batch, q_stride_seq, q_stride_head;
  long long o_stride_batch, o_stride_seq, o_stride_head;
  KvTensor k_cache, v_cache;
  KvPages pages;
  KvLengths lengths;
  int batch, seqlen_q, heads_q, heads_kv;
  int kv_group;      // heads_q / heads_kv
  int rows;          // kv_group * seqlen_q: the packed rows of one (sequence, KV head); row r is token
                     // r / kv_group of query head kv_head * kv_group + r % kv_group
  int num_m_blocks;  // ceil(rows / block_m)
  int num_splits;
  int num_blocks;    // num_splits * num_m_blocks * heads_kv * batch
  float scale_log2;  // softmax scale * log2(e)
};

struct DecodeCombineParams {
  const float* o_partial;
  const float* lse_partial;
  void* o;
  float* lse;  // or null
  long long o_stride_batch, o_stride_seq, o_stride_head;
  int batch, seqlen_q, heads_q;
  int num_rows;  // batch * heads_q * seqlen_q
  int num_splits;
};

struct MergeStatesParams {
  const void* o_a;
  const void* o_b;
  void* o;
  const float* lse_a;
  const float* lse_b;
  float* lse;  // or null
  long long a_stride_batch, a_stride_seq, a_stride_head;
  long long b_stride_batch, b_stride_seq, b_stride_head;
  long long o_stride_batch, o_stride_seq, o_stride_head;
  int batch, seqlen, heads;
  int num_rows;  // batch * heads * seqlen
};

}  // namespace kernel
}  // namespace flashrtc

#pragma once
// Addresses in a paged or contiguous KV cache (decode_params.cuh's KvPages), shared by the append and the
// decode kernels so that both agree on where a token lives and on what a hostile table value means.
#include "flashrtc/decode_params.cuh"

namespace flashrtc {

// Sequence b's length after the append: the cache's (clamped, since it comes from device data) plus the new
// tokens.
__device__ __forceinline__ int kv_length(const kernel::KvLengths& l, int b) {
  if (l.cache_seqlens == nullptr) return l.capacity;
  int n = l.cache_seqlens[b];
  const int most = l.capacity - l.seqlen_new;
  n = n < 0 ? 0 : (n > most ? most : n);
  return n + l.seqlen_new;
}

// The page holding token j of sequence b, or -1 where the table names no page of the cache.
__device__ __forceinline__ int kv_page(const kernel::KvPages& p, int b, int j) {
  int page;
  if (p.block_table != nullptr)
    page = p.block_table[b * p.table_stride + (j >> p.page_shift)];
  else
    page = p.batch_idx != nullptr ? p.batch_idx[b] : b;
  return (page >= 0 && page < p.num_pages) ? page : -1;
}

// Element offset of token j's row of head h, which lies in page (>= 0) at row j % page_size.
__device__ __forceinline__ long long kv_offset(const kernel::KvTensor& t, const kernel::KvPages& p, int page, int j,
                                               int h) {
  const int row = p.page_shift >= 31 ? j : (j & ((1 << p.page_shift) - 1));
  return page * t.stride_page + row * t.stride_seq + h * t.stride_head;
}

}  // namespace flashrtc

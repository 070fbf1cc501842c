#pragma once
// The append of a KV-cache call: k_new and v_new rows written into the cache at each sequence's length,
// through the same page addressing the decode kernels read with (kv_pages.cuh). block_m rows (one token of
// one KV head) per block, 16 bytes per thread at a time (rows_shape.cuh).
#include "flashrtc/decode_params.cuh"
#include "flashrtc/element_types.cuh"
#include "flashrtc/kv_pages.cuh"
#include "flashrtc/rows_shape.cuh"

namespace flashrtc {

template <typename T, int kHeadDim, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) kv_append(const kernel::KvAppendParams p) {
  constexpr RowsShape kShape{kHeadDim, kBlockM, 1, kWarps, 1};
  static_assert(kShape.invalid_reason() == nullptr, "invalid tile for the KV append");
  constexpr int kVector = 16 / sizeof(T);  // elements per 16-byte copy; head_dim is a multiple of 8
  constexpr int kChunks = kHeadDim / kVector;
  const int first = blockIdx.x * kBlockM;
  const int rows = p.num_rows - first < kBlockM ? p.num_rows - first : kBlockM;
  for (int c = threadIdx.x; c < rows * kChunks; c += kWarps * 32) {
    const int row = first + c / kChunks;
    const int col = (c % kChunks) * kVector;
    const int head = row % p.heads_kv;
    const int token = (row / p.heads_kv) % p.lengths.seqlen_new;
    const int batch = row / (p.heads_kv * p.lengths.seqlen_new);
    const int position = kv_length(p.lengths, batch) - p.lengths.seqlen_new + token;
    const int page = kv_page(p.pages, batch, position);
    if (page < 0) continue;  // a page outside the cache holds nothing
    const T* k_src = static_cast<const T*>(p.k_new) + batch * p.k_new_stride_batch + token * p.k_new_stride_seq +
                     head * p.k_new_stride_head + col;
    const T* v_src = static_cast<const T*>(p.v_new) + batch * p.v_new_stride_batch + token * p.v_new_stride_seq +
                     head * p.v_new_stride_head + col;
    T* k_dst = static_cast<T*>(p.k_cache.data) + kv_offset(p.k_cache, p.pages, page, position, head) + col;
    T* v_dst = static_cast<T*>(p.v_cache.data) + kv_offset(p.v_cache, p.pages, page, position, head) + col;
    *reinterpret_cast<uint4*>(k_dst) = *reinterpret_cast<const uint4*>(k_src);
    *reinterpret_cast<uint4*>(v_dst) = *reinterpret_cast<const uint4*>(v_src);
  }
}

}  // namespace flashrtc

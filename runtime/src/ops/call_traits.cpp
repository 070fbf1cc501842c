#include "ops/call_traits.hpp"

#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

namespace {

// Whether a TMA map of rank 4 (dim, seq, head, batch) can describe t: a stride matters only where its
// dimension has more than one index; there it must be non-zero and below 2^40 bytes (alignment to 16 bytes
// is already a rule of every call).
bool tma_describable(const TensorRef& t, std::int64_t seqlen, std::int64_t heads, std::int64_t batch,
                     std::size_t element_bytes) {
  constexpr std::int64_t kLimitBytes = std::int64_t{1} << 40;
  const auto fits = [&](std::int64_t extent, std::int64_t stride) {
    return extent <= 1 || (stride > 0 && stride < kLimitBytes / static_cast<std::int64_t>(element_bytes));
  };
  return fits(seqlen, t.stride_seq) && fits(heads, t.stride_head) && fits(batch, t.stride_batch);
}

// The traits of a call whose kernels map four tensors: two of query rows (q, and o or d_o) and two of key
// rows (k, v), each over `batch` batches (a packed call: one batch of its total rows).
unsigned mapped_call_traits(DType dtype, const TensorRef& q, const TensorRef& q_side, const TensorRef& k,
                            const TensorRef& v, std::int64_t rows_q, std::int64_t rows_k,
                            std::int64_t heads_q, std::int64_t heads_kv, std::int64_t batch) {
  const std::size_t bytes = dtype_size(dtype);
  const bool tma = tma_describable(q, rows_q, heads_q, batch, bytes) &&
                   tma_describable(k, rows_k, heads_kv, batch, bytes) &&
                   tma_describable(v, rows_k, heads_kv, batch, bytes) &&
                   tma_describable(q_side, rows_q, heads_q, batch, bytes);
  return tma ? kCallTmaStrides : 0u;
}

}  // namespace

unsigned forward_call_traits(const ForwardParams& p) {
  return mapped_call_traits(p.dtype, p.q, p.o, p.k, p.v, p.seqlen_q, p.seqlen_kv, p.heads_q, p.heads_kv,
                            p.batch);
}

unsigned varlen_forward_call_traits(const VarlenForwardParams& p) {
  return mapped_call_traits(p.dtype, p.q, p.o, p.k, p.v, p.total_q, p.total_k, p.heads_q, p.heads_kv, 1);
}

unsigned varlen_backward_call_traits(const VarlenBackwardParams& p) {
  return mapped_call_traits(p.dtype, p.q, p.d_o, p.k, p.v, p.total_q, p.total_k, p.heads_q, p.heads_kv, 1);
}

unsigned backward_call_traits(const BackwardParams& p) {
  return mapped_call_traits(p.dtype, p.q, p.d_o, p.k, p.v, p.seqlen_q, p.seqlen_kv, p.heads_q, p.heads_kv,
                            p.batch);
}

}  // namespace flashrtc::detail

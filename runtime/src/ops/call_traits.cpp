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

}  // namespace

unsigned forward_call_traits(const ForwardParams& p) {
  const std::size_t bytes = dtype_size(p.dtype);
  const bool tma = tma_describable(p.q, p.seqlen_q, p.heads_q, p.batch, bytes) &&
                   tma_describable(p.k, p.seqlen_kv, p.heads_kv, p.batch, bytes) &&
                   tma_describable(p.v, p.seqlen_kv, p.heads_kv, p.batch, bytes) &&
                   tma_describable(p.o, p.seqlen_q, p.heads_q, p.batch, bytes);
  return tma ? kCallTmaStrides : 0u;
}

unsigned varlen_forward_call_traits(const VarlenForwardParams& p) {
  const std::size_t bytes = dtype_size(p.dtype);
  const bool tma = tma_describable(p.q, p.total_q, p.heads_q, 1, bytes) &&
                   tma_describable(p.k, p.total_k, p.heads_kv, 1, bytes) &&
                   tma_describable(p.v, p.total_k, p.heads_kv, 1, bytes) &&
                   tma_describable(p.o, p.total_q, p.heads_q, 1, bytes);
  return tma ? kCallTmaStrides : 0u;
}

unsigned varlen_backward_call_traits(const VarlenBackwardParams& p) {
  const std::size_t bytes = dtype_size(p.dtype);
  const bool tma = tma_describable(p.q, p.total_q, p.heads_q, 1, bytes) &&
                   tma_describable(p.k, p.total_k, p.heads_kv, 1, bytes) &&
                   tma_describable(p.v, p.total_k, p.heads_kv, 1, bytes) &&
                   tma_describable(p.d_o, p.total_q, p.heads_q, 1, bytes);
  return tma ? kCallTmaStrides : 0u;
}

unsigned backward_call_traits(const BackwardParams& p) {
  const std::size_t bytes = dtype_size(p.dtype);
  const bool tma = tma_describable(p.q, p.seqlen_q, p.heads_q, p.batch, bytes) &&
                   tma_describable(p.k, p.seqlen_kv, p.heads_kv, p.batch, bytes) &&
                   tma_describable(p.v, p.seqlen_kv, p.heads_kv, p.batch, bytes) &&
                   tma_describable(p.d_o, p.seqlen_q, p.heads_q, p.batch, bytes);
  return tma ? kCallTmaStrides : 0u;
}

}  // namespace flashrtc::detail

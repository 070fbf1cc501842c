#include "ops/backward_validation.hpp"

#include "flashrtc/error.hpp"
#include "ops/forward_validation.hpp"
#include "ops/variants_validation.hpp"

namespace flashrtc::detail {

ForwardParams forward_of(const BackwardParams& p) {
  ForwardParams f;
  f.dtype = p.dtype;
  f.batch = p.batch;
  f.seqlen_q = p.seqlen_q;
  f.seqlen_kv = p.seqlen_kv;
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim = p.head_dim;
  f.q = p.q;
  f.k = p.k;
  f.v = p.v;
  f.o = p.o;
  f.lse = const_cast<float*>(p.lse);  // read only: the forward's checks of it
  f.softmax_scale = p.softmax_scale;
  f.mask = p.mask;
  f.variants = p.variants;
  f.stream = p.stream;
  f.config = p.config;
  return f;
}

void validate_backward_arguments(const BackwardParams& p) {
  check_forward_arguments(forward_of(p));
  if (!p.lse)
    throw Error(ErrorCode::kInvalidArgument,
                "lse is null: the backward needs the forward's lse ([B, Hq, Nq] float32; run the forward "
                "with lse set)");
  const std::size_t elem = dtype_size(p.dtype);
  check_tensor("d_o", p.d_o, p.seqlen_q, p.heads_q, p.batch, p.head_dim, elem);
  check_tensor("d_q", p.d_q, p.seqlen_q, p.heads_q, p.batch, p.head_dim, elem);
  check_tensor("d_k", p.d_k, p.seqlen_kv, p.heads_kv, p.batch, p.head_dim, elem);
  check_tensor("d_v", p.d_v, p.seqlen_kv, p.heads_kv, p.batch, p.head_dim, elem);
  check_variants(p.variants, p.heads_q, p.d_sinks);
  require_served_variants(p.variants, Operation::kBackward);
}

}  // namespace flashrtc::detail

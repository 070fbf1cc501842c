#include "flashrtc_tools/backward_bench.hpp"

#include "flashrtc/device.hpp"
#include "flashrtc_tools/host_tensors.hpp"

namespace flashrtc::tools {

namespace {

// t's strides on another buffer.
TensorRef rebased(const TensorRef& t, const DeviceBuffer& buffer) {
  TensorRef r = t;
  r.data = buffer.data();
  return r;
}

std::size_t bytes_like(const ForwardParams& p, std::int64_t seqlen, std::int64_t heads) {
  return static_cast<std::size_t>(p.batch * seqlen * heads * p.head_dim) * dtype_size(p.dtype);
}

}  // namespace

BackwardParams backward_of(const ForwardParams& f) {
  BackwardParams b;
  b.dtype = f.dtype;
  b.batch = f.batch;
  b.seqlen_q = f.seqlen_q;
  b.seqlen_kv = f.seqlen_kv;
  b.heads_q = f.heads_q;
  b.heads_kv = f.heads_kv;
  b.head_dim = f.head_dim;
  b.q = f.q, b.k = f.k, b.v = f.v, b.o = f.o;
  b.d_o = f.o, b.d_q = f.q, b.d_k = f.k, b.d_v = f.v;
  b.softmax_scale = f.softmax_scale;
  b.mask = f.mask;
  b.config = f.config;
  b.stream = f.stream;
  return b;
}

bool deterministic_for(Operation kernel) {
  return kernel != Operation::kBackwardFused;
}

BackwardBench::BackwardBench(const ForwardParams& forward, bool deterministic, std::uint64_t seed,
                             std::vector<unsigned char>& staging)
    : o_(bytes_like(forward, forward.seqlen_q, forward.heads_q)),
      lse_(static_cast<std::size_t>(forward.batch * forward.heads_q * forward.seqlen_q) * sizeof(float)),
      d_o_(o_.size()),
      d_q_(o_.size()),
      d_k_(bytes_like(forward, forward.seqlen_kv, forward.heads_kv)),
      d_v_(d_k_.size()) {
  ForwardParams f = forward;
  f.o = rebased(forward.o, o_);
  f.lse = static_cast<float*>(lse_.data());
  f.config.reset();  // an explicit tile is the backward's
  f.stream = nullptr;
  attention_forward(f);
  fill_random_normal(forward.dtype, staging,
                     forward.batch * forward.seqlen_q * forward.heads_q * forward.head_dim, seed, 3);
  d_o_.copy_from_host(staging.data(), staging.size());
  device_synchronize();

  params_ = backward_of(forward);
  params_.o = f.o;
  params_.lse = f.lse;
  params_.d_o = rebased(forward.o, d_o_);
  params_.d_q = rebased(forward.q, d_q_);
  params_.d_k = rebased(forward.k, d_k_);
  params_.d_v = rebased(forward.v, d_v_);
  params_.deterministic = deterministic;
}

}  // namespace flashrtc::tools

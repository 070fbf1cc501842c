#include "flashrtc_tools/tune_backward_bench.hpp"

#include <algorithm>

#include "flashrtc_tools/host_tensors.hpp"

namespace flashrtc::tools {

namespace {

std::size_t tensor_bytes(const ForwardParams& p, std::int64_t seqlen, std::int64_t heads) {
  return static_cast<std::size_t>(p.batch * seqlen * heads * p.head_dim) * dtype_size(p.dtype);
}

}  // namespace

BackwardTimingBuffers::BackwardTimingBuffers(const ForwardParams& shape, std::size_t l2_bytes,
                                             std::size_t device_bytes, std::uint64_t seed) {
  const ForwardParams& p = shape;
  const std::size_t q_bytes = tensor_bytes(p, p.seqlen_q, p.heads_q),
                    kv_bytes = tensor_bytes(p, p.seqlen_kv, p.heads_kv);
  // q, o, dO, dQ and k, v, dK, dV, and the lse.
  set_bytes_ =
      4 * q_bytes + 4 * kv_bytes + static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q) * sizeof(float);
  // (floor(2 L2 / set) + 1) sets hold more than 2 L2; at least two, so no launch reads what the last wrote.
  std::size_t count = std::max<std::size_t>(2, 2 * l2_bytes / set_bytes_ + 1);
  count = std::max<std::size_t>(1, std::min(count, device_bytes / 4 * 3 / set_bytes_));
  std::vector<unsigned char> q_host, k_host, v_host, staging;
  fill_random_normal(p.dtype, q_host, p.batch * p.seqlen_q * p.heads_q * p.head_dim, seed, 0);
  fill_random_normal(p.dtype, k_host, p.batch * p.seqlen_kv * p.heads_kv * p.head_dim, seed, 1);
  fill_random_normal(p.dtype, v_host, p.batch * p.seqlen_kv * p.heads_kv * p.head_dim, seed, 2);
  for (std::size_t i = 0; i < count; ++i) {
    DeviceBuffer q(q_bytes), k(kv_bytes), v(kv_bytes);
    q.copy_from_host(q_host.data(), q_bytes);
    k.copy_from_host(k_host.data(), kv_bytes);
    v.copy_from_host(v_host.data(), kv_bytes);
    ForwardParams f = p;
    f.q = make_tensor_ref(kDefaultLayout, q.data(), p.seqlen_q, p.heads_q, p.head_dim);
    f.k = make_tensor_ref(kDefaultLayout, k.data(), p.seqlen_kv, p.heads_kv, p.head_dim);
    f.v = make_tensor_ref(kDefaultLayout, v.data(), p.seqlen_kv, p.heads_kv, p.head_dim);
    f.o = make_tensor_ref(kDefaultLayout, q.data(), p.seqlen_q, p.heads_q, p.head_dim);  // layout only
    f.config.reset();
    BackwardBench bench(f, false, seed, staging);
    sets_.push_back(Set{std::move(q), std::move(k), std::move(v), std::move(bench)});
  }
}

Timing time_backward_candidate(Operation kernel, const TileConfig& tile, const BackwardTimingBuffers& buffers,
                               int warmup, int repeats, void* stream) {
  BackwardParams bound;
  return time_calls(
      [&](std::size_t call) {
        bound = buffers.params(call);
        *explicit_tile(bound, kernel) = tile;
        bound.deterministic = deterministic_for(kernel);
        bound.stream = stream;
      },
      [&] { attention_backward(bound); }, warmup, repeats, stream);
}

}  // namespace flashrtc::tools

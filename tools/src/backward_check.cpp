#include "flashrtc_tools/backward_check.hpp"

#include <tuple>
#include <vector>

#include "flashrtc_reference/attention_reference.hpp"
#include "flashrtc_tools/backward_bench.hpp"
#include "flashrtc_tools/host_tensors.hpp"

namespace flashrtc::tools {

namespace {

// [B, H, N, d] contiguous: the order the reference gradients are compared in, so a tensor's elements are
// compared as they lie.
constexpr Layout kCheckLayout = Layout::kBhnd;

struct HostTensor {
  std::vector<unsigned char> bytes;
  std::vector<double> values;
  TensorRef layout;
  reference::HostTensor<const double> in() const {
    return {values.data(), layout.stride_batch, layout.stride_seq, layout.stride_head, 1};
  }
  reference::HostTensor<double> out() {
    return {values.data(), layout.stride_batch, layout.stride_seq, layout.stride_head, 1};
  }
};

std::vector<double> decode_all(DType dtype, const std::vector<unsigned char>& bytes) {
  std::vector<double> values(bytes.size() / dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = decode_element(dtype, bytes.data(), static_cast<std::int64_t>(i));
  return values;
}

HostTensor random_tensor(const ForwardParams& p, std::int64_t seqlen, std::int64_t heads, std::uint64_t seed,
                         std::uint64_t stream) {
  HostTensor t;
  fill_random_normal(p.dtype, t.bytes, p.batch * seqlen * heads * p.head_dim, seed, stream);
  t.values = decode_all(p.dtype, t.bytes);
  t.layout = make_tensor_ref(kCheckLayout, nullptr, seqlen, heads, p.head_dim);
  return t;
}

DeviceBuffer upload(const std::vector<unsigned char>& bytes) {
  DeviceBuffer buffer(bytes.size());
  buffer.copy_from_host(bytes.data(), bytes.size());
  return buffer;
}

DeviceBuffer poisoned(std::size_t bytes) {
  DeviceBuffer buffer(bytes);
  buffer.fill_bytes(0xFF);  // NaN in every dtype: an element the kernels never write fails the check
  return buffer;
}

TensorRef on(const TensorRef& layout, const DeviceBuffer& buffer) {
  TensorRef t = layout;
  t.data = buffer.data();
  return t;
}

std::vector<double> download(DType dtype, const DeviceBuffer& buffer) {
  std::vector<unsigned char> bytes(buffer.size());
  buffer.copy_to_host(bytes.data(), bytes.size());
  return decode_all(dtype, bytes);
}

}  // namespace

GradientCheck check_backward(const ForwardParams& problem, Operation kernel,
                             const std::optional<TileConfig>& tile, std::uint64_t seed, void* stream) {
  const ForwardParams& p = problem;
  HostTensor q = random_tensor(p, p.seqlen_q, p.heads_q, seed, 0);
  HostTensor k = random_tensor(p, p.seqlen_kv, p.heads_kv, seed, 1);
  HostTensor v = random_tensor(p, p.seqlen_kv, p.heads_kv, seed, 2);
  HostTensor d_o = random_tensor(p, p.seqlen_q, p.heads_q, seed, 3);

  reference::Problem rp;
  rp.batch = p.batch, rp.seqlen_q = p.seqlen_q, rp.seqlen_kv = p.seqlen_kv;
  rp.heads_q = p.heads_q, rp.heads_kv = p.heads_kv, rp.head_dim = p.head_dim;
  rp.mask = p.mask;
  if (p.softmax_scale) rp.scale = *p.softmax_scale;  // unset: the reference's 1/sqrt(d), as the kernel's
  // The forward's outputs as a training step hands them over: o in the dtype, lse in fp32.
  HostTensor o = q;
  std::vector<double> lse(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q));
  reference::forward(rp, q.in(), k.in(), v.in(), o.out(), lse.data());
  for (double& x : o.values) x = reference::round_to(p.dtype, x);
  o.bytes = encode_values(p.dtype, o.values);
  std::vector<float> lse_fp32(lse.begin(), lse.end());
  for (std::size_t i = 0; i < lse.size(); ++i) lse[i] = lse_fp32[i];

  const DeviceBuffer q_dev = upload(q.bytes), k_dev = upload(k.bytes), v_dev = upload(v.bytes),
                     o_dev = upload(o.bytes), do_dev = upload(d_o.bytes);
  DeviceBuffer lse_dev(lse_fp32.size() * sizeof(float));
  lse_dev.copy_from_host(lse_fp32.data(), lse_dev.size());
  const DeviceBuffer dq_dev = poisoned(q.bytes.size()), dk_dev = poisoned(k.bytes.size()),
                     dv_dev = poisoned(v.bytes.size());
  ForwardParams f = p;
  f.q = on(q.layout, q_dev), f.k = on(k.layout, k_dev), f.v = on(v.layout, v_dev), f.o = on(o.layout, o_dev);
  f.config.reset();
  f.stream = stream;
  BackwardParams b = backward_of(f);
  std::optional<TileConfig>* field = explicit_tile(b, kernel);
  if (!field) throw Error(ErrorCode::kInvalidArgument, std::string(to_string(kernel)) + " takes no tile");
  *field = tile;
  b.deterministic = deterministic_for(kernel);
  b.lse = static_cast<const float*>(lse_dev.data());
  b.d_o = on(d_o.layout, do_dev);
  b.d_q = on(q.layout, dq_dev), b.d_k = on(k.layout, dk_dev), b.d_v = on(v.layout, dv_dev);
  attention_backward(b);
  device_synchronize();

  reference::Gradients got{download(p.dtype, dq_dev), download(p.dtype, dk_dev), download(p.dtype, dv_dev)};
  reference::Gradients ref{std::vector<double>(q.values.size()), std::vector<double>(k.values.size()),
                           std::vector<double>(v.values.size())};
  reference::Gradients low = ref;
  const auto views = [&](reference::Gradients& g) {
    return std::tuple{reference::HostTensor<double>{g.dq.data(), q.layout.stride_batch, q.layout.stride_seq,
                                                    q.layout.stride_head, 1},
                      reference::HostTensor<double>{g.dk.data(), k.layout.stride_batch, k.layout.stride_seq,
                                                    k.layout.stride_head, 1},
                      reference::HostTensor<double>{g.dv.data(), v.layout.stride_batch, v.layout.stride_seq,
                                                    v.layout.stride_head, 1}};
  };
  const auto [dq_ref, dk_ref, dv_ref] = views(ref);
  reference::backward(rp, q.in(), k.in(), v.in(), o.in(), lse.data(), d_o.in(), dq_ref, dk_ref, dv_ref);
  const auto [dq_low, dk_low, dv_low] = views(low);
  reference::backward_input_precision(rp, p.dtype, q.in(), k.in(), v.in(), o.in(), lse.data(), d_o.in(),
                                      dq_low, dk_low, dv_low);
  const reference::GradientComparison cmp = reference::compare_gradients(got, ref, low);
  return {cmp.pass(), cmp.summary()};
}

}  // namespace flashrtc::tools

#pragma once
// One backward attention case on the GPU against the reference gradients: fresh random q, k, v and dO, the
// forward's o and lse from the double reference (o rounded to the dtype, lse to fp32: the inputs a training
// step hands the kernel), poisoned gradients, and the tolerance rule (flashrtc_reference::Comparison) on dQ, dK and dV.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashrtc/attention_backward.hpp"
#include "flashrtc/config_resolution.hpp"
#include "support/forward_case.hpp"

namespace flashrtc::testing {

struct BackwardCase {
  DType dtype = DType::kFloat16;
  int head_dim = 64;
  MaskKind mask = MaskKind::kNone;
  std::int64_t batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_kv = 1;
  Layout layout = Layout::kBnhd;
  std::int64_t row_pad = 0;  // extra elements per row of every tensor (a padded view); keep 16-byte multiples
  std::optional<float> scale;
  std::optional<TileConfig> config;
  std::optional<TileConfig> dq_config;  // the dQ pass's explicit tile (Operation::kBackwardDq)
  bool deterministic = false;
  std::uint64_t seed = 1;

  std::string describe() const {
    return std::string(to_string(dtype)) + " d=" + std::to_string(head_dim) +
           " mask=" + std::string(to_string(mask)) + " B=" + std::to_string(batch) +
           " Hq=" + std::to_string(heads_q) + " Hkv=" + std::to_string(heads_kv) +
           " Nq=" + std::to_string(seqlen_q) + " Nk=" + std::to_string(seqlen_kv) +
           (layout == Layout::kBnhd ? " bnhd" : " bhnd") +
           (row_pad ? " pad=" + std::to_string(row_pad) : "") + (config ? " " + to_string(*config) : "") +
           (dq_config ? " dq " + to_string(*dq_config) : "") + (deterministic ? " deterministic" : "");
  }
  ForwardCase as_forward() const {
    ForwardCase f;
    f.dtype = dtype, f.head_dim = head_dim, f.mask = mask;
    f.batch = batch, f.heads_q = heads_q, f.heads_kv = heads_kv, f.seqlen_q = seqlen_q,
    f.seqlen_kv = seqlen_kv;
    f.layout = layout;
    f.row_pad = row_pad;
    return f;
  }
};

inline reference::Problem reference_problem(const BackwardCase& c) {
  reference::Problem problem;
  problem.batch = c.batch;
  problem.seqlen_q = c.seqlen_q;
  problem.seqlen_kv = c.seqlen_kv;
  problem.heads_q = c.heads_q;
  problem.heads_kv = c.heads_kv;
  problem.head_dim = c.head_dim;
  problem.mask = c.mask;
  problem.scale = c.scale;
  return problem;
}

inline reference::HostTensor<const double> view(const HostTensorData& t) {
  return {t.values.data(), t.stride_batch, t.stride_seq, t.stride_head, 1};
}
inline reference::HostTensor<double> mutable_view(HostTensorData& t) {
  return {t.values.data(), t.stride_batch, t.stride_seq, t.stride_head, 1};
}

// The kernels' computation at their input precision (reference::backward_input_precision), gradients in
// [B, H, N, d] order.
inline void backward_input_precision(const BackwardCase& c, const HostTensorData& q, const HostTensorData& k,
                                     const HostTensorData& v, const HostTensorData& o,
                                     const HostTensorData& d_o, const std::vector<float>& lse,
                                     std::vector<double>& dq, std::vector<double>& dk,
                                     std::vector<double>& dv) {
  const std::int64_t d = c.head_dim, q_rows = c.seqlen_q * d, k_rows = c.seqlen_kv * d;
  dq.assign(c.batch * c.heads_q * q_rows, 0.0);
  dk.assign(c.batch * c.heads_kv * k_rows, 0.0);
  dv.assign(dk.size(), 0.0);
  const std::vector<double> lse_values(lse.begin(), lse.end());
  reference::backward_input_precision(
      reference_problem(c), c.dtype, view(q), view(k), view(v), view(o), lse_values.data(), view(d_o),
      {dq.data(), c.heads_q * q_rows, d, q_rows, 1}, {dk.data(), c.heads_kv * k_rows, d, k_rows, 1},
      {dv.data(), c.heads_kv * k_rows, d, k_rows, 1});
}

// A tensor's values gathered into [B, H, N, d] order.
inline std::vector<double> gather(const BackwardCase& c, const HostTensorData& t,
                                  const std::vector<double>& values, std::int64_t seqlen,
                                  std::int64_t heads) {
  std::vector<double> out(c.batch * heads * seqlen * c.head_dim);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t n = 0; n < seqlen; ++n)
        for (std::int64_t e = 0; e < c.head_dim; ++e)
          out[((b * heads + h) * seqlen + n) * c.head_dim + e] =
              values[b * t.stride_batch + n * t.stride_seq + h * t.stride_head + e];
  return out;
}

// The device side of a case: inputs uploaded once, gradients poisoned before each run.
struct BackwardDevice {
  BackwardDevice(const BackwardCase& c, const std::vector<unsigned char>& q,
                 const std::vector<unsigned char>& k, const std::vector<unsigned char>& v,
                 const std::vector<unsigned char>& o, const std::vector<unsigned char>& d_o,
                 const std::vector<float>& lse)
      : q_dev(q.size()),
        k_dev(k.size()),
        v_dev(v.size()),
        o_dev(o.size()),
        do_dev(d_o.size()),
        lse_dev(lse.size() * 4),
        dq_dev(q.size()),
        dk_dev(k.size()),
        dv_dev(v.size()) {
    q_dev.copy_from_host(q.data(), q.size());
    k_dev.copy_from_host(k.data(), k.size());
    v_dev.copy_from_host(v.data(), v.size());
    o_dev.copy_from_host(o.data(), o.size());
    do_dev.copy_from_host(d_o.data(), d_o.size());
    lse_dev.copy_from_host(lse.data(), lse.size() * 4);
  }
  void poison() {
    for (DeviceBuffer* b : {&dq_dev, &dk_dev, &dv_dev}) b->fill_bytes(0xFF);  // NaN in every dtype
  }
  DeviceBuffer q_dev, k_dev, v_dev, o_dev, do_dev, lse_dev, dq_dev, dk_dev, dv_dev;
};

struct BackwardInputs {
  HostTensorData q, k, v, o, d_o;
  std::vector<float> lse;
};

inline BackwardInputs make_backward_inputs(const BackwardCase& c) {
  const ForwardCase f = c.as_forward();
  std::mt19937_64 rng(c.seed * 7919 + static_cast<std::uint64_t>(c.head_dim) * 131 + c.seqlen_q * 17 +
                      c.seqlen_kv);
  BackwardInputs in{make_layout(f, c.seqlen_q, c.heads_q),   make_layout(f, c.seqlen_kv, c.heads_kv),
                    make_layout(f, c.seqlen_kv, c.heads_kv), make_layout(f, c.seqlen_q, c.heads_q),
                    make_layout(f, c.seqlen_q, c.heads_q),   {}};
  fill_random(f, in.q, c.seqlen_q, c.heads_q, rng);
  fill_random(f, in.k, c.seqlen_kv, c.heads_kv, rng);
  fill_random(f, in.v, c.seqlen_kv, c.heads_kv, rng);
  fill_random(f, in.d_o, c.seqlen_q, c.heads_q, rng);
  reference::Problem problem = reference_problem(c);
  std::vector<double> lse(c.batch * c.heads_q * c.seqlen_q);
  reference::forward(problem, view(in.q), view(in.k), view(in.v), mutable_view(in.o), lse.data());
  for (double& x : in.o.values) x = reference::round_to(c.dtype, x);
  in.lse.assign(lse.begin(), lse.end());
  return in;
}

inline BackwardParams backward_params(const BackwardCase& c, const BackwardInputs& in, BackwardDevice& dev) {
  auto ref = [](const DeviceBuffer& buffer, const HostTensorData& t) {
    return TensorRef{buffer.data(), t.stride_batch, t.stride_seq, t.stride_head, 1};
  };
  BackwardParams p;
  p.dtype = c.dtype;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_kv = c.seqlen_kv;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.q = ref(dev.q_dev, in.q);
  p.k = ref(dev.k_dev, in.k);
  p.v = ref(dev.v_dev, in.v);
  p.o = ref(dev.o_dev, in.o);
  p.d_o = ref(dev.do_dev, in.d_o);
  p.lse = static_cast<const float*>(dev.lse_dev.data());
  p.d_q = ref(dev.dq_dev, in.q);
  p.d_k = ref(dev.dk_dev, in.k);
  p.d_v = ref(dev.dv_dev, in.v);
  p.softmax_scale = c.scale;
  p.mask = c.mask;
  p.deterministic = c.deterministic;
  p.config = c.config;
  p.dq_config = c.dq_config;
  return p;
}

struct BackwardResult {
  bool pass = false;
  std::string report;
  std::vector<unsigned char> dq, dk, dv;  // the raw bits, for determinism checks
};

inline std::vector<unsigned char> download(const DeviceBuffer& buffer) {
  std::vector<unsigned char> bytes(buffer.size());
  buffer.copy_to_host(bytes.data(), bytes.size());
  return bytes;
}

// Compiles every kernel the cases launch on the current device, on all cores at once (NVRTC and the cache are
// thread-safe): from a cold cache the suite would otherwise spend most of its time compiling one at a time.
inline void warm_backward_kernels(const std::vector<BackwardCase>& cases) {
  const DeviceTarget target = current_device_target().value_or(no_device_target());
  std::vector<KernelSpec> specs;
  for (const BackwardCase& c : cases) {
    BackwardParams call;  // the case's shape without tensors
    call.dtype = c.dtype, call.head_dim = c.head_dim, call.mask = c.mask, call.seqlen_q = c.seqlen_q,
    call.seqlen_kv = c.seqlen_kv, call.deterministic = c.deterministic, call.config = c.config,
    call.dq_config = c.dq_config;
    for (Operation op : backward_operations(call, target.arch)) {
      ConfigQuery q = config_query(call, op);
      q.traits = kAllCallTraits;  // the cases' tensors are contiguous or padded views, which TMA maps describe
      const ConfigResolution r = resolve_config(q, target);
      const KernelSpec spec{c.dtype, c.head_dim, c.mask, r.config, r.family};
      const bool known = std::any_of(specs.begin(), specs.end(), [&](const KernelSpec& s) {
        return s.family == spec.family && s.dtype == spec.dtype && s.head_dim == spec.head_dim &&
               s.mask == spec.mask && s.tile == spec.tile;
      });
      if (!known) specs.push_back(spec);
    }
  }
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
    workers.emplace_back([&] {
      for (std::size_t i = next++; i < specs.size(); i = next++) compile_kernel(specs[i], target.arch);
    });
  for (std::thread& w : workers) w.join();
}

// Runs c `runs` times on the GPU (poisoning the gradients before each) and checks the last run.
inline BackwardResult run_backward_case(const BackwardCase& c, int runs = 1,
                                        std::vector<BackwardResult>* all = nullptr) {
  const BackwardInputs in = make_backward_inputs(c);
  BackwardDevice dev(c, encode(c.dtype, in.q.values), encode(c.dtype, in.k.values),
                     encode(c.dtype, in.v.values), encode(c.dtype, in.o.values),
                     encode(c.dtype, in.d_o.values), in.lse);
  const BackwardParams p = backward_params(c, in, dev);
  BackwardResult result;
  for (int run = 0; run < runs; ++run) {
    dev.poison();
    attention_backward(p);
    device_synchronize();
    result.dq = download(dev.dq_dev), result.dk = download(dev.dk_dev), result.dv = download(dev.dv_dev);
    if (all) all->push_back(result);
  }

  // References in [B, H, N, d] order: double, and the kernels' input precision.
  const reference::Problem problem = reference_problem(c);
  std::vector<double> lse_d(in.lse.begin(), in.lse.end());
  const std::int64_t d = c.head_dim;
  std::vector<double> dq_ref(c.batch * c.heads_q * c.seqlen_q * d),
      dk_ref(c.batch * c.heads_kv * c.seqlen_kv * d), dv_ref(dk_ref.size());
  const std::int64_t q_rows = c.seqlen_q * d, k_rows = c.seqlen_kv * d;
  reference::backward(problem, view(in.q), view(in.k), view(in.v), view(in.o), lse_d.data(), view(in.d_o),
                      {dq_ref.data(), c.heads_q * q_rows, d, q_rows, 1},
                      {dk_ref.data(), c.heads_kv * k_rows, d, k_rows, 1},
                      {dv_ref.data(), c.heads_kv * k_rows, d, k_rows, 1});
  std::vector<double> dq_low, dk_low, dv_low;
  backward_input_precision(c, in.q, in.k, in.v, in.o, in.d_o, in.lse, dq_low, dk_low, dv_low);

  const reference::Gradients got{gather(c, in.q, decode(c.dtype, result.dq), c.seqlen_q, c.heads_q),
                                 gather(c, in.k, decode(c.dtype, result.dk), c.seqlen_kv, c.heads_kv),
                                 gather(c, in.v, decode(c.dtype, result.dv), c.seqlen_kv, c.heads_kv)};
  const reference::GradientComparison cmp =
      reference::compare_gradients(got, {std::move(dq_ref), std::move(dk_ref), std::move(dv_ref)},
                                   {std::move(dq_low), std::move(dk_low), std::move(dv_low)});
  result.report = c.describe() + "\n  dq: " + cmp.dq.summary() + "\n  dk: " + cmp.dk.summary() +
                  "\n  dv: " + cmp.dv.summary();
  result.pass = cmp.pass();
  // Padding between rows must be untouched (still poisoned): the kernels write only inside the views.
  if (c.row_pad > 0) {
    const auto touched = [&](const HostTensorData& t, const std::vector<unsigned char>& bytes,
                             std::int64_t seqlen, std::int64_t heads) {
      const std::vector<double> values = decode(c.dtype, bytes);
      std::int64_t count = 0;
      for (std::int64_t b = 0; b < c.batch; ++b)
        for (std::int64_t n = 0; n < seqlen; ++n)
          for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t e = c.head_dim; e < c.head_dim + c.row_pad; ++e)
              if (!std::isnan(values[b * t.stride_batch + n * t.stride_seq + h * t.stride_head + e])) ++count;
      return count;
    };
    const std::int64_t written = touched(in.q, result.dq, c.seqlen_q, c.heads_q) +
                                 touched(in.k, result.dk, c.seqlen_kv, c.heads_kv) +
                                 touched(in.v, result.dv, c.seqlen_kv, c.heads_kv);
    if (written) {
      result.pass = false;
      result.report += "\n  padding written: " + std::to_string(written) + " elements";
    }
  }
  return result;
}

// A case's geometry: batch, heads, lengths and layout.
struct BackwardShape {
  std::int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_kv;
  Layout layout;
};

inline BackwardCase make_backward_case(DType dtype, int d, MaskKind mask, const BackwardShape& s) {
  BackwardCase c;
  c.dtype = dtype, c.head_dim = d, c.mask = mask;
  c.batch = s.batch, c.heads_q = s.heads_q, c.heads_kv = s.heads_kv;
  c.seqlen_q = s.seqlen_q, c.seqlen_kv = s.seqlen_kv;
  c.layout = s.layout;
  return c;
}

// Runs c once and CHECKs that it passes the tolerance rule, its report on failure.
inline void check_backward_case(const BackwardCase& c) {
  const auto result = run_backward_case(c);
  INFO(result.report);
  CHECK(result.pass);
  if (!result.pass) MESSAGE(result.report);
}

}  // namespace flashrtc::testing

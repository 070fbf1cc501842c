#pragma once
// One forward attention case on the GPU against the Eigen reference: fresh random inputs, poisoned outputs,
// the tolerance rule (flashrtc_reference::Comparison) on o and lse. Shared by the gpu suites.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "driver/driver_api.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc/flashrtc.hpp"
#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::testing {

enum class Layout { kBnhd, kBhnd };

struct ForwardCase {
  DType dtype = DType::kFloat32;
  int head_dim = 64;
  MaskKind mask = MaskKind::kNone;
  std::int64_t batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_kv = 1;
  Layout layout = Layout::kBnhd;
  std::int64_t row_pad = 0;  // extra elements per row of every tensor (a padded view); keep 16-byte multiples
  std::optional<float> scale;
  std::optional<TileConfig> config;
  bool with_lse = true;
  void* stream = nullptr;
  // Capture the call into a CUDA graph on `stream` (required) and replay it twice instead of launching it.
  bool via_graph = false;
  std::uint64_t seed = 1;
  // The call's window and softcap, given to the reference too (docs/variants.md).
  AttentionVariants variants;

  std::string describe() const {
    return std::string(to_string(dtype)) + " d=" + std::to_string(head_dim) + " mask=" + std::string(to_string(mask)) +
           " B=" + std::to_string(batch) + " Hq=" + std::to_string(heads_q) + " Hkv=" + std::to_string(heads_kv) +
           " Nq=" + std::to_string(seqlen_q) + " Nk=" + std::to_string(seqlen_kv) +
           (layout == Layout::kBnhd ? " bnhd" : " bhnd") + (row_pad ? " pad=" + std::to_string(row_pad) : "") +
           (config ? " " + to_string(*config) : "") + (stream ? " stream" : "") +
           (via_graph ? " graph" : "") +
           (variants.window_left != -1 || variants.window_right != -1
                ? " window=(" + std::to_string(variants.window_left) + "," + std::to_string(variants.window_right) + ")"
                : "") +
           (variants.softcap > 0.f ? " softcap=" + std::to_string(variants.softcap) : "");
  }
};

// A host tensor of doubles plus its strides, in the case's layout, holding values exactly representable in
// the dtype; `device_bytes` is the same tensor encoded in the dtype.
struct HostTensorData {
  std::vector<double> values;
  std::int64_t stride_batch, stride_seq, stride_head;
};

inline HostTensorData make_layout(const ForwardCase& c, std::int64_t seqlen, std::int64_t heads) {
  HostTensorData t;
  const std::int64_t row = c.head_dim + c.row_pad;
  if (c.layout == Layout::kBnhd) {
    t.stride_head = row;
    t.stride_seq = heads * row;
    t.stride_batch = seqlen * heads * row;
  } else {
    t.stride_seq = row;
    t.stride_head = seqlen * row;
    t.stride_batch = heads * seqlen * row;
  }
  t.values.assign(static_cast<std::size_t>(c.batch * t.stride_batch), 0.0);
  return t;
}

inline std::vector<unsigned char> encode(DType dtype, const std::vector<double>& values) {
  std::vector<unsigned char> bytes(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kFloat32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(&bytes[i * 4], &f, 4);
    } else {
      const std::uint16_t h = dtype == DType::kFloat16 ? reference::float_to_half_bits(static_cast<float>(values[i]))
                                                       : reference::float_to_bf16_bits(static_cast<float>(values[i]));
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

inline std::vector<double> decode(DType dtype, const std::vector<unsigned char>& bytes) {
  std::vector<double> values(bytes.size() / dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      values[i] = f;
    } else {
      std::uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      values[i] = dtype == DType::kFloat16 ? reference::half_bits_to_float(h) : reference::bf16_bits_to_float(h);
    }
  }
  return values;
}

inline void fill_random(const ForwardCase& c, HostTensorData& t, std::int64_t seqlen, std::int64_t heads,
                        std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t n = 0; n < seqlen; ++n)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t d = 0; d < c.head_dim; ++d)
          t.values[b * t.stride_batch + n * t.stride_seq + h * t.stride_head + d] = reference::round_to(c.dtype, normal(rng));
}

struct CaseResult {
  bool pass = false;
  std::string report;
  std::vector<double> output;  // o in [B, Hq, Nq, d] order
};

// Captures launch() on stream into a graph (global capture mode: any call that is unsafe while capturing
// fails), then replays it twice; every driver status is checked.
template <typename F>
void replay_in_graph(F&& launch, CUstream stream) {
  const detail::DriverApi& api = detail::driver();
  FLASHRTC_CU_CHECK(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  try {
    launch();
  } catch (...) {
    CUgraph aborted = nullptr;
    api.cuStreamEndCapture(stream, &aborted);
    if (aborted) api.cuGraphDestroy(aborted);
    throw;
  }
  CUgraph graph = nullptr;
  FLASHRTC_CU_CHECK(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec = nullptr;
  FLASHRTC_CU_CHECK(cuGraphInstantiate, &exec, graph, 0);
  for (int replay = 0; replay < 2; ++replay) FLASHRTC_CU_CHECK(cuGraphLaunch, exec, stream);
  FLASHRTC_CU_CHECK(cuStreamSynchronize, stream);
  FLASHRTC_CU_CHECK(cuGraphExecDestroy, exec);
  FLASHRTC_CU_CHECK(cuGraphDestroy, graph);
}

// Runs c on the GPU and checks it; every (batch, head) is checked, references computed on host threads.
inline CaseResult run_forward_case(const ForwardCase& c) {
  std::mt19937_64 rng(c.seed * 7919 + static_cast<std::uint64_t>(c.head_dim) * 131 + c.seqlen_q * 17 + c.seqlen_kv);
  HostTensorData q = make_layout(c, c.seqlen_q, c.heads_q);
  HostTensorData k = make_layout(c, c.seqlen_kv, c.heads_kv);
  HostTensorData v = make_layout(c, c.seqlen_kv, c.heads_kv);
  HostTensorData o = make_layout(c, c.seqlen_q, c.heads_q);
  fill_random(c, q, c.seqlen_q, c.heads_q, rng);
  fill_random(c, k, c.seqlen_kv, c.heads_kv, rng);
  fill_random(c, v, c.seqlen_kv, c.heads_kv, rng);

  const std::size_t elem = dtype_size(c.dtype);
  DeviceBuffer q_dev(q.values.size() * elem), k_dev(k.values.size() * elem), v_dev(v.values.size() * elem),
      o_dev(o.values.size() * elem);
  const std::int64_t lse_count = c.batch * c.heads_q * c.seqlen_q;
  DeviceBuffer lse_dev(c.with_lse ? static_cast<std::size_t>(lse_count) * 4 : 0);
  const auto q_bytes = encode(c.dtype, q.values), k_bytes = encode(c.dtype, k.values), v_bytes = encode(c.dtype, v.values);
  q_dev.copy_from_host(q_bytes.data(), q_bytes.size());
  k_dev.copy_from_host(k_bytes.data(), k_bytes.size());
  v_dev.copy_from_host(v_bytes.data(), v_bytes.size());
  o_dev.fill_bytes(0xFF);  // NaN in every dtype: an element the kernel forgets to write fails the check
  if (c.with_lse) lse_dev.fill_bytes(0xFF);

  ForwardParams p;
  p.dtype = c.dtype;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_kv = c.seqlen_kv;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.q = {q_dev.data(), q.stride_batch, q.stride_seq, q.stride_head, 1};
  p.k = {k_dev.data(), k.stride_batch, k.stride_seq, k.stride_head, 1};
  p.v = {v_dev.data(), v.stride_batch, v.stride_seq, v.stride_head, 1};
  p.o = {o_dev.data(), o.stride_batch, o.stride_seq, o.stride_head, 1};
  p.lse = c.with_lse ? static_cast<float*>(lse_dev.data()) : nullptr;
  p.softmax_scale = c.scale;
  p.mask = c.mask;
  p.stream = c.stream;
  p.config = c.config;
  p.variants = c.variants;
  if (c.via_graph) {
    replay_in_graph([&] { attention_forward(p); }, static_cast<CUstream>(c.stream));
  } else {
    attention_forward(p);
  }
  device_synchronize();

  std::vector<unsigned char> o_bytes(o.values.size() * elem);
  o_dev.copy_to_host(o_bytes.data(), o_bytes.size());
  const std::vector<double> o_got = decode(c.dtype, o_bytes);
  std::vector<float> lse_got(c.with_lse ? lse_count : 0);
  if (c.with_lse) lse_dev.copy_to_host(lse_got.data(), lse_got.size() * 4);

  reference::Problem problem;
  problem.batch = c.batch;
  problem.seqlen_q = c.seqlen_q;
  problem.seqlen_kv = c.seqlen_kv;
  problem.heads_q = c.heads_q;
  problem.heads_kv = c.heads_kv;
  problem.head_dim = c.head_dim;
  problem.mask = c.mask;
  problem.scale = c.scale;
  problem.window_left = c.variants.window_left;
  problem.window_right = c.variants.window_right;
  problem.softcap = c.variants.softcap;

  // Reference outputs in [B, Hq, Nq, d] order, and the kernel's output gathered into the same order.
  const std::int64_t rows = c.batch * c.heads_q * c.seqlen_q;
  std::vector<double> ref(rows * c.head_dim), ref_lowp(rows * c.head_dim), got(rows * c.head_dim);
  std::vector<double> lse_ref(rows), lse_lowp(rows), lse_gotd(rows);
  const auto ref_q = reference::HostTensor<const double>{q.values.data(), q.stride_batch, q.stride_seq, q.stride_head, 1};
  const auto ref_k = reference::HostTensor<const double>{k.values.data(), k.stride_batch, k.stride_seq, k.stride_head, 1};
  const auto ref_v = reference::HostTensor<const double>{v.values.data(), v.stride_batch, v.stride_seq, v.stride_head, 1};
  // [B, Hq, Nq, d] views: each (b, h) task writes its own rows of these.
  const std::int64_t head_rows = c.seqlen_q * c.head_dim;
  const reference::HostTensor<double> out{ref.data(), c.heads_q * head_rows, c.head_dim, head_rows, 1};
  const reference::HostTensor<double> out_lowp{ref_lowp.data(), c.heads_q * head_rows, c.head_dim, head_rows, 1};
  std::vector<std::future<void>> work;
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < c.heads_q; ++h)
      work.push_back(std::async(std::launch::async, [&, b, h] {
        reference::forward_head(problem, b, h, ref_q, ref_k, ref_v, out, lse_ref.data());
        reference::forward_head_input_precision(problem, c.dtype, b, h, ref_q, ref_k, ref_v, out_lowp, lse_lowp.data());
      }));
  for (auto& w : work) w.get();
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < c.heads_q; ++h)
      for (std::int64_t n = 0; n < c.seqlen_q; ++n) {
        const std::int64_t row = (b * c.heads_q + h) * c.seqlen_q + n;
        for (std::int64_t d = 0; d < c.head_dim; ++d)
          got[row * c.head_dim + d] = o_got[b * o.stride_batch + n * o.stride_seq + h * o.stride_head + d];
        if (c.with_lse) lse_gotd[row] = lse_got[row];
      }

  CaseResult result;
  result.output = got;
  const reference::Comparison out_cmp =
      reference::compare_forward_o(got.data(), ref.data(), ref_lowp.data(), rows * c.head_dim, v.values);
  result.pass = out_cmp.pass;
  result.report = c.describe() + "\n  o:   " + out_cmp.summary();
  if (c.with_lse) {
    const reference::Comparison lse_cmp =
        reference::compare_forward_lse(lse_gotd.data(), lse_ref.data(), lse_lowp.data(), rows);
    result.pass = result.pass && lse_cmp.pass;
    result.report += "\n  lse: " + lse_cmp.summary();
  }
  // Padding between rows must be untouched (still poisoned), i.e. the kernel wrote only inside the view.
  if (c.row_pad > 0) {
    std::int64_t touched = 0;
    for (std::int64_t b = 0; b < c.batch; ++b)
      for (std::int64_t h = 0; h < c.heads_q; ++h)
        for (std::int64_t n = 0; n < c.seqlen_q; ++n)
          for (std::int64_t d = c.head_dim; d < c.head_dim + c.row_pad; ++d)
            if (!std::isnan(o_got[b * o.stride_batch + n * o.stride_seq + h * o.stride_head + d])) ++touched;
    if (touched) {
      result.pass = false;
      result.report += "\n  padding written: " + std::to_string(touched) + " elements";
    }
  }
  return result;
}

// Runs c eagerly and captured into a CUDA graph (on c.stream), each against the reference: the replay must
// give the eager call's bits (same inputs, same kernel; whichever block takes a tile).
inline void check_graph_replays_eager(ForwardCase c) {
  c.via_graph = false;
  const CaseResult eager = run_forward_case(c);
  c.via_graph = true;
  const CaseResult replayed = run_forward_case(c);
  INFO(replayed.report);
  CHECK(eager.pass);
  CHECK(replayed.pass);
  CHECK(replayed.output == eager.output);
}

}  // namespace flashrtc::testing

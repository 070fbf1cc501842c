#include "flashrtc_tools/tune_bench.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "flashrtc_tools/forward_check.hpp"
#include "flashrtc_tools/host_tensors.hpp"

namespace flashrtc::tools {

namespace {

std::size_t tensor_bytes(const ForwardParams& p, std::int64_t seqlen, std::int64_t heads) {
  return static_cast<std::size_t>(p.batch * seqlen * heads * p.head_dim) * dtype_size(p.dtype);
}

// Contiguous tensors of the default layout, as the calls being tuned for usually pass them.
void set_layout(ForwardParams& p, const void* q, const void* k, const void* v, const void* o) {
  p.q = make_tensor_ref(kDefaultLayout, q, p.seqlen_q, p.heads_q, p.head_dim);
  p.k = make_tensor_ref(kDefaultLayout, k, p.seqlen_kv, p.heads_kv, p.head_dim);
  p.v = make_tensor_ref(kDefaultLayout, v, p.seqlen_kv, p.heads_kv, p.head_dim);
  p.o = make_tensor_ref(kDefaultLayout, o, p.seqlen_q, p.heads_q, p.head_dim);
}

// forward_check prints to a FILE; a memory stream keeps its report for the tuner's own output.
std::string verify_to_string(const ForwardCheck& check, const unsigned char* o, const TensorRef& o_layout,
                             const std::vector<float>& lse, bool& pass) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = ::open_memstream(&buffer, &size);
  pass = check.verify(o, o_layout, lse, out);
  std::string report;
  if (out) {
    std::fclose(out);
    report.assign(buffer, size);
    std::free(buffer);
  }
  return report;
}

}  // namespace

ForwardParams check_problem(const ForwardParams& tuned) {
  constexpr std::int64_t kMaxLength = 333;
  ForwardParams p = tuned;
  p.batch = 1;
  p.heads_q = p.heads_kv = 2;
  const std::int64_t longest = std::max(tuned.seqlen_q, tuned.seqlen_kv);
  if (longest > kMaxLength) {
    const double scale = double(kMaxLength) / double(longest);
    p.seqlen_q = std::max<std::int64_t>(1, std::llround(double(tuned.seqlen_q) * scale));
    p.seqlen_kv = std::max<std::int64_t>(1, std::llround(double(tuned.seqlen_kv) * scale));
  }
  p.config.reset();
  p.lse = nullptr;
  return p;
}

CheckOutcome check_candidate(const ForwardParams& problem, const TileConfig& tile, std::uint64_t seed,
                             void* stream) {
  ForwardParams p = problem;
  const std::int64_t q_count = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
  const std::int64_t kv_count = p.batch * p.seqlen_kv * p.heads_kv * p.head_dim;
  const std::int64_t lse_count = p.batch * p.heads_q * p.seqlen_q;
  DeviceBuffer q(tensor_bytes(p, p.seqlen_q, p.heads_q)), k(tensor_bytes(p, p.seqlen_kv, p.heads_kv)),
      v(tensor_bytes(p, p.seqlen_kv, p.heads_kv)), o(tensor_bytes(p, p.seqlen_q, p.heads_q)),
      lse(static_cast<std::size_t>(lse_count) * sizeof(float));
  set_layout(p, q.data(), k.data(), v.data(), o.data());
  p.lse = static_cast<float*>(lse.data());
  p.config = tile;
  p.stream = stream;

  ForwardCheck check(p);
  std::vector<unsigned char> staging;
  fill_random_normal(p.dtype, staging, q_count, seed, 0);
  q.copy_from_host(staging.data(), staging.size());
  check.take_q(staging.data(), p.q);
  fill_random_normal(p.dtype, staging, kv_count, seed, 1);
  k.copy_from_host(staging.data(), staging.size());
  check.take_k(staging.data(), p.k);
  fill_random_normal(p.dtype, staging, kv_count, seed, 2);
  v.copy_from_host(staging.data(), staging.size());
  check.take_v(staging.data(), p.v);
  o.fill_bytes(0xFF);  // NaN in every dtype: an element the kernel never writes fails the check
  lse.fill_bytes(0xFF);

  attention_forward(p);
  device_synchronize();
  staging.resize(o.size());
  o.copy_to_host(staging.data(), staging.size());
  std::vector<float> lse_host(static_cast<std::size_t>(lse_count));
  lse.copy_to_host(lse_host.data(), lse_host.size() * sizeof(float));
  CheckOutcome outcome;
  outcome.report = verify_to_string(check, staging.data(), p.o, lse_host, outcome.pass);
  return outcome;
}

TimingBuffers::TimingBuffers(const ForwardParams& shape, std::size_t l2_bytes, std::size_t device_bytes,
                             std::uint64_t seed) {
  const ForwardParams& p = shape;
  const std::size_t q_bytes = tensor_bytes(p, p.seqlen_q, p.heads_q),
                    kv_bytes = tensor_bytes(p, p.seqlen_kv, p.heads_kv);
  const std::size_t set_bytes = 2 * q_bytes + 2 * kv_bytes;
  // (floor(2 L2 / set) + 1) sets hold more than 2 L2; at least two, so no launch reads what the last wrote.
  std::size_t count = std::max<std::size_t>(2, 2 * l2_bytes / set_bytes + 1);
  count = std::max<std::size_t>(1, std::min(count, device_bytes / 4 * 3 / set_bytes));
  std::vector<unsigned char> q_host, k_host, v_host;
  fill_random_normal(p.dtype, q_host, p.batch * p.seqlen_q * p.heads_q * p.head_dim, seed, 0);
  fill_random_normal(p.dtype, k_host, p.batch * p.seqlen_kv * p.heads_kv * p.head_dim, seed, 1);
  fill_random_normal(p.dtype, v_host, p.batch * p.seqlen_kv * p.heads_kv * p.head_dim, seed, 2);
  for (std::size_t i = 0; i < count; ++i) {
    Set set{DeviceBuffer(q_bytes), DeviceBuffer(kv_bytes), DeviceBuffer(kv_bytes), DeviceBuffer(q_bytes)};
    set.q.copy_from_host(q_host.data(), q_bytes);
    set.k.copy_from_host(k_host.data(), kv_bytes);
    set.v.copy_from_host(v_host.data(), kv_bytes);
    sets_.push_back(std::move(set));
  }
}

std::size_t TimingBuffers::total_bytes() const {
  std::size_t bytes = 0;
  for (const Set& s : sets_) bytes += s.q.size() + s.k.size() + s.v.size() + s.o.size();
  return bytes;
}

ForwardParams TimingBuffers::bind(ForwardParams p, std::size_t launch) const {
  const Set& s = sets_[launch % sets_.size()];
  set_layout(p, s.q.data(), s.k.data(), s.v.data(), s.o.data());
  return p;
}

Timing time_calls(const std::function<void(std::size_t)>& prepare, const std::function<void()>& launch,
                  int warmup, int repeats, void* stream) {
  std::size_t call = 0;
  for (int i = 0; i < warmup; ++i) {
    prepare(call++);
    launch();
  }
  EventTimer timer;
  std::vector<double> times_ms;
  for (int i = 0; i < repeats; ++i) {
    prepare(call++);
    timer.start(stream);
    launch();
    timer.stop(stream);
    times_ms.push_back(timer.elapsed_ms());
  }
  std::sort(times_ms.begin(), times_ms.end());
  const std::size_t n = times_ms.size();
  Timing t;
  t.median_ms = n % 2 ? times_ms[n / 2] : 0.5 * (times_ms[n / 2 - 1] + times_ms[n / 2]);
  t.min_ms = times_ms.front();
  t.max_ms = times_ms.back();
  return t;
}

Timing time_candidate(const ForwardParams& shape, const TileConfig& tile, const TimingBuffers& buffers,
                      int warmup, int repeats, void* stream) {
  ForwardParams p = shape;
  p.config = tile;
  p.stream = stream;
  p.lse = nullptr;
  ForwardParams bound;
  return time_calls([&](std::size_t call) { bound = buffers.bind(p, call); },
                    [&] { attention_forward(bound); }, warmup, repeats, stream);
}

}  // namespace flashrtc::tools

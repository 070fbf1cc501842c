#include "flashrtc_tools/forward_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <string>

#include "flashrtc_reference/attention_reference.hpp"
#include "flashrtc_tools/host_tensors.hpp"

namespace flashrtc::tools {

namespace {

// Reference multiply-adds (Nq * Nk * d per head) below which every head is checked: about a second of
// Eigen work in double.
constexpr double kCheckAllWork = 1u << 30;
constexpr std::int64_t kMaxSampledHeads = 4;

struct HeadResult {
  std::vector<double> o_ref, o_lowp, lse_ref, lse_lowp;
};

}  // namespace

ForwardCheck::ForwardCheck(const ForwardParams& params) : params_(params) {
  const std::int64_t pairs = params.batch * params.heads_q;
  const double work = static_cast<double>(pairs) * params.seqlen_q * params.seqlen_kv * params.head_dim;
  const std::int64_t count = work <= kCheckAllWork ? pairs : std::min(pairs, kMaxSampledHeads);
  for (std::int64_t i = 0; i < count; ++i) {
    // Evenly spread over the flattened (batch, head) index: i = 0 is the first pair, i = count - 1 the last.
    const std::int64_t index = count == 1 ? 0 : i * (pairs - 1) / (count - 1);
    samples_.emplace_back(index / params.heads_q, index % params.heads_q);
  }
}

void ForwardCheck::take_q(const unsigned char* bytes, const TensorRef& layout) {
  for (const HeadKey& s : samples_)
    q_rows_[s] =
        extract_head(params_.dtype, bytes, layout, s.first, s.second, params_.seqlen_q, params_.head_dim);
}

void ForwardCheck::take_k(const unsigned char* bytes, const TensorRef& layout) {
  take_kv(bytes, layout, k_rows_);
}

void ForwardCheck::take_v(const unsigned char* bytes, const TensorRef& layout) {
  take_kv(bytes, layout, v_rows_);
}

// The kv heads the sampled query heads read (GQA: query head h reads kv head h / group), each kept once.
void ForwardCheck::take_kv(const unsigned char* bytes, const TensorRef& layout,
                           std::map<HeadKey, std::vector<double>>& rows) {
  const std::int64_t group = params_.heads_q / params_.heads_kv;
  for (const HeadKey& s : samples_) {
    const HeadKey kv{s.first, s.second / group};
    if (!rows.count(kv))
      rows[kv] = extract_head(params_.dtype, bytes, layout, kv.first, kv.second, params_.seqlen_kv,
                              params_.head_dim);
  }
}

bool ForwardCheck::verify(const unsigned char* o_bytes, const TensorRef& o_layout,
                          const std::vector<float>& lse, std::FILE* out) const {
  const auto print = [out](const char* format, auto... args) {
    if (out) std::fprintf(out, format, args...);
  };
  const ForwardParams& p = params_;
  const std::int64_t d = p.head_dim, group = p.heads_q / p.heads_kv;
  // Each sampled head is a problem of its own (one batch, one head), so only its rows are on the host.
  reference::Problem problem;
  problem.seqlen_q = p.seqlen_q;
  problem.seqlen_kv = p.seqlen_kv;
  problem.head_dim = d;
  problem.mask = p.mask;
  if (p.softmax_scale) problem.scale = *p.softmax_scale;  // unset: the reference's 1/sqrt(d), as the kernel's
  // The variants a forward kernel serves (the checks refuse the others before any launch).
  problem.window_left = p.variants.window_left;
  problem.window_right = p.variants.window_right;
  problem.softcap = p.variants.softcap;

  std::vector<std::future<HeadResult>> pending;
  for (const HeadKey& s : samples_)
    pending.push_back(std::async(std::launch::async, [&, s] {
      const HeadKey kv{s.first, s.second / group};
      using In = reference::HostTensor<const double>;
      const In q = In::bnhd(q_rows_.at(s).data(), p.seqlen_q, 1, d);
      const In k = In::bnhd(k_rows_.at(kv).data(), p.seqlen_kv, 1, d);
      const In v = In::bnhd(v_rows_.at(kv).data(), p.seqlen_kv, 1, d);
      HeadResult r;
      r.o_ref.resize(p.seqlen_q * d);
      r.o_lowp.resize(p.seqlen_q * d);
      r.lse_ref.resize(p.seqlen_q);
      r.lse_lowp.resize(p.seqlen_q);
      using Out = reference::HostTensor<double>;
      reference::forward_head(problem, 0, 0, q, k, v, Out::bnhd(r.o_ref.data(), p.seqlen_q, 1, d),
                              r.lse_ref.data());
      reference::forward_head_input_precision(
          problem, p.dtype, 0, 0, q, k, v, Out::bnhd(r.o_lowp.data(), p.seqlen_q, 1, d), r.lse_lowp.data());
      return r;
    }));

  print(
      "check: %lld of %lld (batch, head) pairs against the double reference; allowed error = 2 x the "
      "input-precision reference's error + 1e-6 x max(|ref|, |v|) for o, max(|ref|, 1) for lse\n",
      static_cast<long long>(samples_.size()), static_cast<long long>(p.batch * p.heads_q));
  bool pass = true;
  for (std::size_t i = 0; i < samples_.size(); ++i) {
    const HeadKey& s = samples_[i];
    const HeadResult r = pending[i].get();
    const std::vector<double> o_got =
        extract_head(p.dtype, o_bytes, o_layout, s.first, s.second, p.seqlen_q, d);
    std::vector<double> lse_got(p.seqlen_q);
    const std::int64_t lse_row = (s.first * p.heads_q + s.second) * p.seqlen_q;
    for (std::int64_t n = 0; n < p.seqlen_q; ++n) lse_got[n] = lse[lse_row + n];
    const auto o_cmp = reference::compare_forward_o(o_got.data(), r.o_ref.data(), r.o_lowp.data(),
                                                    p.seqlen_q * d, v_rows_.at({s.first, s.second / group}));
    const auto lse_cmp =
        reference::compare_forward_lse(lse_got.data(), r.lse_ref.data(), r.lse_lowp.data(), p.seqlen_q);
    print("  b=%-3lld h=%-3lld o:   %s\n", static_cast<long long>(s.first), static_cast<long long>(s.second),
          o_cmp.summary().c_str());
    print("  %-12s lse: %s\n", "", lse_cmp.summary().c_str());
    pass = pass && o_cmp.pass && lse_cmp.pass;
  }

  // The outputs were poisoned with 0xFF bytes (NaN in every dtype) before the launch; the inputs are finite,
  // so a NaN anywhere, checked head or not, is an element the kernel never wrote.
  const std::int64_t o_count = p.batch * p.seqlen_q * p.heads_q * d;
  std::int64_t o_nan = 0, lse_nan = 0;
  for (std::int64_t i = 0; i < o_count; ++i) o_nan += std::isnan(decode_element(p.dtype, o_bytes, i)) ? 1 : 0;
  for (float value : lse) lse_nan += std::isnan(value) ? 1 : 0;
  print("  unwritten (still NaN): o %lld of %lld, lse %lld of %lld\n", static_cast<long long>(o_nan),
        static_cast<long long>(o_count), static_cast<long long>(lse_nan), static_cast<long long>(lse.size()));
  pass = pass && o_nan == 0 && lse_nan == 0;
  print("check: %s\n", pass ? "PASS" : "FAIL");
  return pass;
}

}  // namespace flashrtc::tools

// `flashrtc run --check`'s verdict (tools::ForwardCheck) on host buffers, no GPU: outputs the reference
// computes pass, outputs of another softmax scale or with a row left unwritten fail, and an lse near 0 off by
// a score's fp32 rounding passes. Calls without a scale use 1/sqrt(d) on both sides.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "flashrtc_reference/attention_reference.hpp"
#include "flashrtc_tools/forward_check.hpp"
#include "flashrtc_tools/host_tensors.hpp"

using namespace flashrtc;

namespace {

struct Call {
  ForwardParams p;
  std::vector<unsigned char> q, k, v;
};

Call make_call(MaskKind mask, std::optional<float> scale, std::int64_t seqlen_q = 37,
               std::int64_t seqlen_kv = 53) {
  Call c;
  ForwardParams& p = c.p;
  p.dtype = DType::kFloat32, p.batch = 2, p.seqlen_q = seqlen_q, p.seqlen_kv = seqlen_kv;
  p.heads_q = 4, p.heads_kv = 2;
  p.head_dim = 32, p.mask = mask, p.softmax_scale = scale;
  const std::int64_t q_count = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
  const std::int64_t kv_count = p.batch * p.seqlen_kv * p.heads_kv * p.head_dim;
  tools::fill_random_normal(p.dtype, c.q, q_count, 5, 0);
  tools::fill_random_normal(p.dtype, c.k, kv_count, 5, 1);
  tools::fill_random_normal(p.dtype, c.v, kv_count, 5, 2);
  p.q = tools::make_tensor_ref(tools::Layout::kBnhd, c.q.data(), p.seqlen_q, p.heads_q, p.head_dim);
  p.k = tools::make_tensor_ref(tools::Layout::kBnhd, c.k.data(), p.seqlen_kv, p.heads_kv, p.head_dim);
  p.v = tools::make_tensor_ref(tools::Layout::kBnhd, c.v.data(), p.seqlen_kv, p.heads_kv, p.head_dim);
  return c;
}

std::vector<double> decode(const Call& c, const std::vector<unsigned char>& bytes) {
  std::vector<double> values(bytes.size() / 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = tools::decode_element(c.p.dtype, bytes.data(), i);
  return values;
}

// o (bnhd, fp32 bytes) and lse of the double reference at `scale` (unset: 1/sqrt(d)).
void reference_outputs(const Call& c, std::optional<double> scale, std::vector<unsigned char>& o,
                       std::vector<float>& lse) {
  const ForwardParams& p = c.p;
  reference::Problem problem;
  problem.batch = p.batch, problem.seqlen_q = p.seqlen_q, problem.seqlen_kv = p.seqlen_kv;
  problem.heads_q = p.heads_q, problem.heads_kv = p.heads_kv, problem.head_dim = p.head_dim;
  problem.mask = p.mask, problem.scale = scale;
  const std::vector<double> q = decode(c, c.q), k = decode(c, c.k), v = decode(c, c.v);
  using In = reference::HostTensor<const double>;
  std::vector<double> o_values(q.size());
  std::vector<double> lse_values(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q));
  reference::forward(problem, In::bnhd(q.data(), p.seqlen_q, p.heads_q, p.head_dim),
                     In::bnhd(k.data(), p.seqlen_kv, p.heads_kv, p.head_dim),
                     In::bnhd(v.data(), p.seqlen_kv, p.heads_kv, p.head_dim),
                     reference::HostTensor<double>::bnhd(o_values.data(), p.seqlen_q, p.heads_q, p.head_dim),
                     lse_values.data());
  for (double& x : o_values) x = static_cast<float>(x);
  o = tools::encode_values(p.dtype, o_values);
  lse.assign(lse_values.begin(), lse_values.end());
}

bool verify(const Call& c, const std::vector<unsigned char>& o, const std::vector<float>& lse) {
  tools::ForwardCheck check(c.p);
  check.take_q(c.q.data(), c.p.q);
  check.take_k(c.k.data(), c.p.k);
  check.take_v(c.v.data(), c.p.v);
  const TensorRef o_layout = tools::make_tensor_ref(tools::Layout::kBnhd, o.data(), c.p.seqlen_q, c.p.heads_q,
                                                    c.p.head_dim);
  return check.verify(o.data(), o_layout, lse, nullptr);
}

}  // namespace

TEST_CASE("run --check passes the reference's outputs and fails another scale's, with and without a scale") {
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight})
    for (std::optional<float> scale : {std::optional<float>{}, std::optional<float>{0.4f}}) {
      CAPTURE(static_cast<int>(mask));
      CAPTURE(scale.has_value());
      const Call c = make_call(mask, scale);
      std::vector<unsigned char> o;
      std::vector<float> lse;
      reference_outputs(c, scale ? std::optional<double>(*scale) : std::nullopt, o, lse);
      CHECK(verify(c, o, lse));
      // A kernel that ignored the call's scale (or took 0 for "unset") must not pass.
      reference_outputs(c, scale ? std::nullopt : std::optional<double>(0.0), o, lse);
      CHECK_FALSE(verify(c, o, lse));
    }
}

TEST_CASE("run --check fails an output row the kernel never wrote") {
  const Call c = make_call(MaskKind::kNone, std::nullopt);
  std::vector<unsigned char> o;
  std::vector<float> lse;
  reference_outputs(c, std::nullopt, o, lse);
  lse[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(verify(c, o, lse));
}

TEST_CASE("run --check: one visible key and an lse near 0, off by the score's rounding, passes") {
  // One query row under the top-left causal mask sees key 0 alone: lse is its scaled score. With key 0 of
  // every kv head made orthogonal to the queries (zero), lse = 0 and o = v0 exactly in both references, so
  // their budget is 0; a kernel that sums q.k in another order is off by a few fp32 ulps of its terms.
  Call c = make_call(MaskKind::kCausalTopLeft, std::nullopt, 1, 17);
  const std::int64_t row_bytes = c.p.head_dim * 4;
  for (std::int64_t b = 0; b < c.p.batch; ++b)
    for (std::int64_t h = 0; h < c.p.heads_kv; ++h)
      std::fill_n(c.k.begin() + (b * c.p.seqlen_kv * c.p.heads_kv + h) * row_bytes, row_bytes, 0);
  std::vector<unsigned char> o;
  std::vector<float> lse;
  reference_outputs(c, std::nullopt, o, lse);
  for (float x : lse) REQUIRE(x == 0.0f);
  CHECK(verify(c, o, lse));
  for (float& x : lse) x = 2e-7f;  // the rounding of a score summed in another order
  CHECK(verify(c, o, lse));
  lse[3] = 5e-6f;  // beyond the floor of 1e-6 x max(|lse|, 1)
  CHECK_FALSE(verify(c, o, lse));
}

// The gpu backward suite's error budget (tests/support/backward_case.hpp): its fp32 model of the kernels
// agrees with the double reference gradients to fp32 rounding, and its 16-bit model differs by a 16-bit
// rounding budget that is neither zero nor gross (an indexing slip in the model would show as either).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "support/backward_case.hpp"

using namespace flashrtc;
using flashrtc::testing::BackwardCase;

namespace {

struct Errors {
  double dq, dk, dv;
};

Errors model_errors(const BackwardCase& c) {
  const auto in = flashrtc::testing::make_backward_inputs(c);
  const reference::Problem problem = flashrtc::testing::reference_problem(c);
  const std::int64_t d = c.head_dim, q_rows = c.seqlen_q * d, k_rows = c.seqlen_kv * d;
  std::vector<double> dq(c.batch * c.heads_q * q_rows), dk(c.batch * c.heads_kv * k_rows), dv(dk.size());
  std::vector<double> lse(in.lse.begin(), in.lse.end());
  using flashrtc::testing::view;
  reference::backward(problem, view(in.q), view(in.k), view(in.v), view(in.o), lse.data(), view(in.d_o),
                      {dq.data(), c.heads_q * q_rows, d, q_rows, 1},
                      {dk.data(), c.heads_kv * k_rows, d, k_rows, 1},
                      {dv.data(), c.heads_kv * k_rows, d, k_rows, 1});
  std::vector<double> dq_low, dk_low, dv_low;
  flashrtc::testing::backward_input_precision(c, in.q, in.k, in.v, in.o, in.d_o, in.lse, dq_low, dk_low,
                                              dv_low);
  auto relative = [](const std::vector<double>& got, const std::vector<double>& ref) {
    double err = 0, scale = 1e-30;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, std::fabs(got[i] - ref[i]));
      scale = std::max(scale, std::fabs(ref[i]));
    }
    return err / scale;
  };
  return {relative(dq_low, dq), relative(dk_low, dk), relative(dv_low, dv)};
}

}  // namespace

TEST_CASE("the backward's input-precision model against the double reference gradients") {
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
    BackwardCase c;
    c.head_dim = 40, c.mask = mask;
    c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.seqlen_q = 37, c.seqlen_kv = 23;
    c.layout = flashrtc::testing::Layout::kBhnd;
    c.dtype = DType::kFloat32;
    const Errors fp32 = model_errors(c);
    INFO(to_string(mask) << " fp32: " << fp32.dq << " " << fp32.dk << " " << fp32.dv);
    CHECK(fp32.dq < 1e-5);
    CHECK(fp32.dk < 1e-5);
    CHECK(fp32.dv < 1e-5);
    c.dtype = DType::kBFloat16;
    const Errors bf16 = model_errors(c);
    INFO(to_string(mask) << " bf16: " << bf16.dq << " " << bf16.dk << " " << bf16.dv);
    for (double e : {bf16.dq, bf16.dk, bf16.dv}) {
      CHECK(e > 1e-4);
      CHECK(e < 3e-2);
    }
  }
}

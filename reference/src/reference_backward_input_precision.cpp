// The backward as the kernels compute it at their input precision: fp32 arithmetic on the given inputs, P
// rounded to the element type before P^T dO and dS before dS K and dS^T Q (the tensor-core operands; a no-op
// for fp32), dK and dV summed over a GQA group in fp32, outputs rounded to the element type. Its error
// against the double gradients is the budget of the tolerance rule (Comparison) for the backward kernels.
#include <cmath>
#include <future>
#include <stdexcept>
#include <vector>

#include "head_matrices.hpp"
#include "variants.hpp"

namespace flashrtc::reference {

void backward_group_input_precision(const Problem& p, DType dtype, std::int64_t b, std::int64_t hk,
                                    const HostTensor<const double>& q, const HostTensor<const double>& k,
                                    const HostTensor<const double>& v, const HostTensor<const double>& o,
                                    const double* lse, const HostTensor<const double>& dout,
                                    const HostTensor<double>& dq, const HostTensor<double>& dk,
                                    const HostTensor<double>& dv, double* d_sinks) {
  detail::check_problem(p);
  if (b < 0 || b >= p.batch || hk < 0 || hk >= p.heads_kv)
    throw std::invalid_argument("reference: (batch, kv head) out of range");
  if (!lse) throw std::invalid_argument("reference: the backward needs the forward's lse");
  const std::int64_t d = p.head_dim, nq = p.seqlen_q, nk = p.seqlen_kv, group = p.heads_q / p.heads_kv;
  // The scale is a float kernel argument, rounded once from double as the host passes it.
  const float scale = static_cast<float>(p.effective_scale());
  const auto at = [](const HostTensor<const double>& t, std::int64_t bb, std::int64_t n, std::int64_t h,
                     std::int64_t e) { return static_cast<float>(t.at(bb, n, h, e)); };
  const auto round = [dtype](float x) { return static_cast<float>(round_to(dtype, x)); };
  const bool sinks = !p.sinks.empty() && d_sinks;
  std::vector<float> dk_acc(nk * d, 0.f), dv_acc(nk * d, 0.f), probs(nk), ds(nk);
  for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    float d_sink = 0.f;
    for (std::int64_t i = 0; i < nq; ++i) {
      const float row_lse =
          static_cast<float>(lse[detail::lse_index(p, b, h, i)]);  // fp32, as the kernel reads it
      float delta = 0.f;
      for (std::int64_t e = 0; e < d; ++e) delta += at(dout, b, i, h, e) * at(o, b, i, h, e);
      for (std::int64_t j = 0; j < nk; ++j) {
        float s = 0.f, dp = 0.f;
        for (std::int64_t e = 0; e < d; ++e) {
          s += at(q, b, i, h, e) * at(k, b, j, hk, e);
          dp += at(dout, b, i, h, e) * at(v, b, j, hk, e);
        }
        const bool visible = detail::visible(p, i, j) && std::isfinite(row_lse);
        const float raw = s * scale;
        probs[j] = visible ? std::exp(detail::score(p, b, h, i, j, raw) - row_lse) : 0.f;
        ds[j] = probs[j] * (dp - delta) * detail::score_derivative(p, raw);
      }
      if (sinks && std::isfinite(row_lse))
        d_sink -= std::exp(static_cast<float>(p.sinks[static_cast<std::size_t>(h)]) - row_lse) * delta;
      for (std::int64_t e = 0; e < d; ++e) {
        float acc = 0.f;
        for (std::int64_t j = 0; j < nk; ++j) acc += round(ds[j]) * at(k, b, j, hk, e);
        dq.at(b, i, h, e) = round_to(dtype, acc * scale);
      }
      for (std::int64_t j = 0; j < nk; ++j)
        for (std::int64_t e = 0; e < d; ++e) {
          dv_acc[j * d + e] += round(probs[j]) * at(dout, b, i, h, e);
          dk_acc[j * d + e] += round(ds[j]) * at(q, b, i, h, e);
        }
    }
    if (sinks) d_sinks[h] += d_sink;
  }
  for (std::int64_t j = 0; j < nk; ++j)
    for (std::int64_t e = 0; e < d; ++e) {
      dk.at(b, j, hk, e) = round_to(dtype, dk_acc[j * d + e] * scale);
      dv.at(b, j, hk, e) = round_to(dtype, dv_acc[j * d + e]);
    }
}

void backward_input_precision(const Problem& p, DType dtype, const HostTensor<const double>& q,
                              const HostTensor<const double>& k, const HostTensor<const double>& v,
                              const HostTensor<const double>& o, const double* lse,
                              const HostTensor<const double>& dout, const HostTensor<double>& dq,
                              const HostTensor<double>& dk, const HostTensor<double>& dv, double* d_sinks) {
  detail::check_problem(p);
  // Each batch adds its sinks' gradient into its own row, summed in batch order after: the groups of
  // different batches share heads.
  const bool sinks = !p.sinks.empty() && d_sinks;
  std::vector<double> d_sinks_rows(sinks ? static_cast<std::size_t>(p.batch * p.heads_q) : 0, 0.0);
  std::vector<std::future<void>> work;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t hk = 0; hk < p.heads_kv; ++hk)
      work.push_back(std::async(std::launch::async, [&, b, hk] {
        backward_group_input_precision(p, dtype, b, hk, q, k, v, o, lse, dout, dq, dk, dv,
                                       sinks ? d_sinks_rows.data() + b * p.heads_q : nullptr);
      }));
  for (auto& w : work) w.get();
  if (!sinks) return;
  for (std::int64_t h = 0; h < p.heads_q; ++h) {
    float sum = 0.f;  // fp32, as the kernels' gradient
    for (std::int64_t b = 0; b < p.batch; ++b) sum += static_cast<float>(d_sinks_rows[b * p.heads_q + h]);
    d_sinks[h] = sum;
  }
}

}  // namespace flashrtc::reference

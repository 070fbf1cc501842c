// The double-precision reference gradients of attention: P recomputed from q, k and the forward's lse (as the
// FlashAttention-2 backward does), then the analytic chain rule through O = P V, the row softmax (with its
// sink) and the score's softcap.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "head_matrices.hpp"
#include "variants.hpp"

namespace flashrtc::reference {

namespace {

using Matrix = detail::RowMatrix<double>;

// D of rows [row0, row0 + rows) of head (b, h).
Eigen::VectorXd delta_rows(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t row0,
                           std::int64_t rows, const HostTensor<const double>& o,
                           const HostTensor<const double>& dout) {
  const Matrix out = detail::load_rows<double>(o, b, h, row0, rows, p.head_dim);
  const Matrix dout_rows = detail::load_rows<double>(dout, b, h, row0, rows, p.head_dim);
  return dout_rows.cwiseProduct(out).rowwise().sum();
}

}  // namespace

void backward_delta(const Problem& p, const HostTensor<const double>& o, const HostTensor<const double>& dout,
                    double* delta) {
  detail::check_problem(p);
  if (!delta) throw std::invalid_argument("reference: backward_delta needs a delta array");
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const Eigen::VectorXd d = delta_rows(p, b, h, 0, p.seqlen_q, o, dout);
      for (std::int64_t i = 0; i < p.seqlen_q; ++i) delta[detail::lse_index(p, b, h, i)] = d(i);
    }
}

void backward_head(const Problem& p, std::int64_t b, std::int64_t h, const HostTensor<const double>& q,
                   const HostTensor<const double>& k, const HostTensor<const double>& v,
                   const HostTensor<const double>& o, const double* lse, const HostTensor<const double>& dout,
                   const HostTensor<double>& dq, const HostTensor<double>& dk, const HostTensor<double>& dv,
                   double* d_sinks) {
  detail::check_head(p, b, h);
  if (!lse) throw std::invalid_argument("reference: the backward needs the forward's lse");
  const std::int64_t hk = detail::kv_head(p, h);
  const Matrix keys = detail::load_rows<double>(k, b, hk, 0, p.seqlen_kv, p.head_dim);
  const Matrix values = detail::load_rows<double>(v, b, hk, 0, p.seqlen_kv, p.head_dim);
  const double scale = p.effective_scale();
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  Matrix dk_head = Matrix::Zero(p.seqlen_kv, p.head_dim);
  Matrix dv_head = Matrix::Zero(p.seqlen_kv, p.head_dim);
  const bool softcap = p.softcap > 0;
  const bool sinks = !p.sinks.empty() && d_sinks;
  Matrix raw, probs, dprobs, dq_rows;
  for (std::int64_t row0 = 0; row0 < p.seqlen_q; row0 += detail::kRowsPerChunk) {
    const std::int64_t rows = std::min(detail::kRowsPerChunk, p.seqlen_q - row0);
    const Matrix queries = detail::load_rows<double>(q, b, h, row0, rows, p.head_dim);
    const Matrix dout_rows = detail::load_rows<double>(dout, b, h, row0, rows, p.head_dim);
    const Eigen::VectorXd delta = delta_rows(p, b, h, row0, rows, o, dout);

    probs.noalias() = scale * (queries * keys.transpose());
    if (softcap) raw = probs;  // the softcap's derivative is taken at the raw score
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = row0 + r;
      const double row_lse = lse[detail::lse_index(p, b, h, i)];
      if (row_lse == kNegInf) {  // no visible key: the row took no part in the forward
        probs.row(r).setZero();
        continue;
      }
      for (std::int64_t j = 0; j < p.seqlen_kv; ++j)
        probs(r, j) =
            detail::visible(p, i, j) ? std::exp(detail::score(p, b, h, i, j, probs(r, j)) - row_lse) : 0.0;
      // The sink's probability exp(sink - lse) times its dP (0: no value row) minus D.
      if (sinks) d_sinks[h] -= std::exp(p.sinks[static_cast<std::size_t>(h)] - row_lse) * delta(r);
    }

    dv_head.noalias() += probs.transpose() * dout_rows;
    dprobs.noalias() = dout_rows * values.transpose();
    // dS = P * (dP - D), in place in dprobs; then by the raw score through the softcap.
    dprobs = probs.cwiseProduct(dprobs.colwise() - delta);
    if (softcap)
      dprobs = dprobs.cwiseProduct(raw.unaryExpr([&p](double x) { return detail::score_derivative(p, x); }));
    dq_rows.noalias() = scale * (dprobs * keys);
    dk_head.noalias() += scale * (dprobs.transpose() * queries);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t d = 0; d < p.head_dim; ++d) dq.at(b, row0 + r, h, d) = dq_rows(r, d);
  }
  for (std::int64_t j = 0; j < p.seqlen_kv; ++j)
    for (std::int64_t d = 0; d < p.head_dim; ++d) {
      dk.at(b, j, hk, d) += dk_head(j, d);
      dv.at(b, j, hk, d) += dv_head(j, d);
    }
}

void backward(const Problem& p, const HostTensor<const double>& q, const HostTensor<const double>& k,
              const HostTensor<const double>& v, const HostTensor<const double>& o, const double* lse,
              const HostTensor<const double>& dout, const HostTensor<double>& dq,
              const HostTensor<double>& dk, const HostTensor<double>& dv, double* d_sinks) {
  detail::check_problem(p);
  if (d_sinks && !p.sinks.empty()) std::fill(d_sinks, d_sinks + p.heads_q, 0.0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t hk = 0; hk < p.heads_kv; ++hk)
      for (std::int64_t j = 0; j < p.seqlen_kv; ++j)
        for (std::int64_t d = 0; d < p.head_dim; ++d) dk.at(b, j, hk, d) = dv.at(b, j, hk, d) = 0;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      backward_head(p, b, h, q, k, v, o, lse, dout, dq, dk, dv, d_sinks);
}

}  // namespace flashrtc::reference

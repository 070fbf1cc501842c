// The double-precision reference: softmax(scale * Q K^T + mask) V per head, with the variants (window,
// softcap, ALiBi, sinks), the truth kernels are checked against.
#include <algorithm>
#include <cmath>
#include <limits>

#include "head_matrices.hpp"
#include "variants.hpp"

namespace flashrtc::reference {

void forward_head(const Problem& p, std::int64_t b, std::int64_t h, const HostTensor<const double>& q,
                  const HostTensor<const double>& k, const HostTensor<const double>& v,
                  const HostTensor<double>& o, double* lse) {
  detail::check_head(p, b, h);
  using Matrix = detail::RowMatrix<double>;
  const std::int64_t hk = detail::kv_head(p, h);
  const Matrix keys = detail::load_rows<double>(k, b, hk, 0, p.seqlen_kv, p.head_dim);
  const Matrix values = detail::load_rows<double>(v, b, hk, 0, p.seqlen_kv, p.head_dim);
  const double scale = p.effective_scale();
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  // The sink joins the row's max and denominator; it has no value row.
  const double sink = p.sinks.empty() ? kNegInf : p.sinks[static_cast<std::size_t>(h)];

  Matrix scores, out;
  for (std::int64_t row0 = 0; row0 < p.seqlen_q; row0 += detail::kRowsPerChunk) {
    const std::int64_t rows = std::min(detail::kRowsPerChunk, p.seqlen_q - row0);
    const Matrix queries = detail::load_rows<double>(q, b, h, row0, rows, p.head_dim);
    scores.noalias() = scale * (queries * keys.transpose());
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = row0 + r;
      double row_max = sink;
      for (std::int64_t j = 0; j < p.seqlen_kv; ++j) {
        if (detail::visible(p, i, j)) {
          scores(r, j) = detail::score(p, b, h, i, j, scores(r, j));
          row_max = std::max(row_max, scores(r, j));
        } else {
          scores(r, j) = kNegInf;
        }
      }
      if (row_max == kNegInf) {  // no visible key and no sink: exp(-inf - -inf) would be NaN
        scores.row(r).setZero();
        if (lse) lse[detail::lse_index(p, b, h, i)] = kNegInf;
        continue;
      }
      double row_sum = std::exp(sink - row_max);  // 0 without a sink
      for (std::int64_t j = 0; j < p.seqlen_kv; ++j) {
        scores(r, j) = std::exp(scores(r, j) - row_max);  // masked keys: exp(-inf) = 0
        row_sum += scores(r, j);
      }
      scores.row(r) /= row_sum;
      if (lse) lse[detail::lse_index(p, b, h, i)] = row_max + std::log(row_sum);
    }
    out.noalias() = scores * values;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t d = 0; d < p.head_dim; ++d) o.at(b, row0 + r, h, d) = out(r, d);
  }
}

void forward(const Problem& p, const HostTensor<const double>& q, const HostTensor<const double>& k,
             const HostTensor<const double>& v, const HostTensor<double>& o, double* lse) {
  detail::check_problem(p);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h) forward_head(p, b, h, q, k, v, o, lse);
}

}  // namespace flashrtc::reference

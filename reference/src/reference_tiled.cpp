// FlashAttention-2's blocked forward (Dao 2023, Algorithm 1) in double: the algebra the kernels implement,
// checked against the reference with no rounding error in the way.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "head_matrices.hpp"

namespace flashrtc::reference {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kLn2 = 0.693147180559945309417232121458176568;
constexpr double kLog2e = 1.442695040888963407359924681001892137;

void forward_head_tiled(const Problem& p, int block_m, int block_n, std::int64_t b, std::int64_t h,
                        const HostTensor<const double>& q, const HostTensor<const double>& k,
                        const HostTensor<const double>& v, const HostTensor<double>& o, double* lse) {
  using Matrix = detail::RowMatrix<double>;
  using Vector = Eigen::VectorXd;
  const std::int64_t hk = detail::kv_head(p, h);
  const Matrix queries = detail::load_rows<double>(q, b, h, 0, p.seqlen_q, p.head_dim);
  const Matrix keys = detail::load_rows<double>(k, b, hk, 0, p.seqlen_kv, p.head_dim);
  const Matrix values = detail::load_rows<double>(v, b, hk, 0, p.seqlen_kv, p.head_dim);
  // Folding log2(e) into the scale turns every exp into exp2, as the kernels do (one FFMA + EX2 per score).
  const double scale_log2 = p.effective_scale() * kLog2e;

  Matrix scores, acc;
  Vector row_max, row_sum;
  for (std::int64_t m0 = 0; m0 < p.seqlen_q; m0 += block_m) {
    const std::int64_t rows = std::min<std::int64_t>(block_m, p.seqlen_q - m0);
    acc.setZero(rows, p.head_dim);
    row_max.setConstant(rows, kNegInf);
    row_sum.setZero(rows);
    for (std::int64_t n0 = 0; n0 < p.seqlen_kv; n0 += block_n) {
      const std::int64_t cols = std::min<std::int64_t>(block_n, p.seqlen_kv - n0);
      scores.noalias() = scale_log2 * (queries.middleRows(m0, rows) * keys.middleRows(n0, cols).transpose());
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t i = m0 + r;
        double block_max = kNegInf;
        for (std::int64_t c = 0; c < cols; ++c) {
          if (mask_allows(p.mask, i, n0 + c, p.seqlen_q, p.seqlen_kv))
            block_max = std::max(block_max, scores(r, c));
          else
            scores(r, c) = kNegInf;
        }
        const double new_max = std::max(row_max(r), block_max);
        // While a row has seen no visible key its max is -inf; subtracting 0 instead keeps exp2(-inf - -inf)
        // from turning the (all zero) probabilities and accumulator into NaN.
        const double safe_max = new_max == kNegInf ? 0.0 : new_max;
        const double rescale = std::exp2(row_max(r) - safe_max);
        for (std::int64_t c = 0; c < cols; ++c) scores(r, c) = std::exp2(scores(r, c) - safe_max);
        row_sum(r) = rescale * row_sum(r) + scores.row(r).sum();
        acc.row(r) *= rescale;
        row_max(r) = new_max;
      }
      acc.noalias() += scores * values.middleRows(n0, cols);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = m0 + r;
      // As in the kernels: l = 0 marks a row that saw no key, whose accumulator is 0 (not NaN) only if the
      // -inf guard above worked.
      const double inv_sum = row_sum(r) > 0 ? 1.0 / row_sum(r) : 0.0;
      for (std::int64_t d = 0; d < p.head_dim; ++d) o.at(b, i, h, d) = acc(r, d) * inv_sum;
      if (lse)
        lse[detail::lse_index(p, b, h, i)] =
            row_sum(r) > 0 ? (row_max(r) + std::log2(row_sum(r))) * kLn2 : kNegInf;
    }
  }
}

}  // namespace

void forward_tiled(const Problem& p, int block_m, int block_n, const HostTensor<const double>& q,
                   const HostTensor<const double>& k, const HostTensor<const double>& v,
                   const HostTensor<double>& o, double* lse) {
  detail::check_problem(p);
  // The blocked algorithm of plain attention: refused rather than computed without the variants.
  if (p.has_variants()) throw std::invalid_argument("reference: forward_tiled takes no variants");
  if (block_m < 1 || block_n < 1)
    throw std::invalid_argument("forward_tiled: block sizes must be at least 1");
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      forward_head_tiled(p, block_m, block_n, b, h, q, k, v, o, lse);
}

}  // namespace flashrtc::reference

// The forward computation as a kernel performs it at its input precision: fp32 scores and softmax (exp2 with
// the scale folded in), P rounded to the element type before the P V product as a tensor-core MMA needs it,
// fp32 accumulation, output rounded to the element type. Its error against the double reference is the
// budget of the tolerance rule (Comparison).
#include <algorithm>
#include <cmath>
#include <limits>

#include "head_matrices.hpp"
#include "variants.hpp"

namespace flashrtc::reference {

namespace {
constexpr double kLog2e = 1.442695040888963407359924681001892137;
constexpr float kLn2f = 0.693147180559945309417232121458176568f;

float round_float_to(DType dtype, float x) {
  switch (dtype) {
    case DType::kFloat32:
      return x;
    case DType::kFloat16:
      return half_bits_to_float(float_to_half_bits(x));
    case DType::kBFloat16:
      return bf16_bits_to_float(float_to_bf16_bits(x));
  }
  return x;
}
}  // namespace

void forward_head_input_precision(const Problem& p, DType dtype, std::int64_t b, std::int64_t h,
                                  const HostTensor<const double>& q, const HostTensor<const double>& k,
                                  const HostTensor<const double>& v, const HostTensor<double>& o,
                                  double* lse) {
  detail::check_head(p, b, h);
  using Matrix = detail::RowMatrix<float>;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t hk = detail::kv_head(p, h);
  const Matrix keys = detail::load_rows<float>(k, b, hk, 0, p.seqlen_kv, p.head_dim);
  const Matrix values = detail::load_rows<float>(v, b, hk, 0, p.seqlen_kv, p.head_dim);
  // The scale is a float kernel argument: rounded once, in double, as the host does when it passes it.
  const float scale_log2 = static_cast<float>(p.effective_scale() * kLog2e);
  const bool round_probabilities = dtype != DType::kFloat32;
  // Softcap and ALiBi act on the scaled score in fp32 before the log2 factor; without them the scale and the
  // log2 factor are one multiplication, as the kernels fold them.
  const bool modified_score = p.softcap > 0 || !p.alibi_slopes.empty();
  const float scale = static_cast<float>(p.effective_scale());
  const float log2e = static_cast<float>(kLog2e);
  // The sink in log2 units joins the row's max and sum; it has no value row.
  const float sink_log2 =
      p.sinks.empty() ? kNegInf : static_cast<float>(p.sinks[static_cast<std::size_t>(h)]) * log2e;

  Matrix scores, out;
  Eigen::VectorXf row_sum;
  for (std::int64_t row0 = 0; row0 < p.seqlen_q; row0 += detail::kRowsPerChunk) {
    const std::int64_t rows = std::min(detail::kRowsPerChunk, p.seqlen_q - row0);
    const Matrix queries = detail::load_rows<float>(q, b, h, row0, rows, p.head_dim);
    scores.noalias() = queries * keys.transpose();
    row_sum.setZero(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = row0 + r;
      float row_max = sink_log2;
      for (std::int64_t j = 0; j < p.seqlen_kv; ++j) {
        if (detail::visible(p, i, j)) {
          if (modified_score)
            scores(r, j) = detail::score(p, b, h, i, j, scores(r, j) * scale) * log2e;
          else
            scores(r, j) *= scale_log2;
          row_max = std::max(row_max, scores(r, j));
        } else {
          scores(r, j) = kNegInf;
        }
      }
      if (row_max == kNegInf) {  // no visible key, no sink: o = 0, lse = -inf, and no exp2(-inf - -inf)
        scores.row(r).setZero();
        if (lse) lse[detail::lse_index(p, b, h, i)] = -std::numeric_limits<double>::infinity();
        continue;
      }
      float sum = std::exp2(sink_log2 - row_max);  // 0 without a sink
      for (std::int64_t j = 0; j < p.seqlen_kv; ++j) {
        const float prob = std::exp2(scores(r, j) - row_max);
        // The kernel sums P in fp32 before converting it to the MMA's operand type.
        sum += prob;
        scores(r, j) = round_probabilities ? round_float_to(dtype, prob) : prob;
      }
      row_sum(r) = sum;
      if (lse) lse[detail::lse_index(p, b, h, i)] = static_cast<double>((row_max + std::log2(sum)) * kLn2f);
    }
    out.noalias() = scores * values;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t d = 0; d < p.head_dim; ++d) {
        const float value = row_sum(r) > 0 ? out(r, d) / row_sum(r) : 0.0f;
        o.at(b, row0 + r, h, d) = static_cast<double>(round_float_to(dtype, value));
      }
  }
}

}  // namespace flashrtc::reference

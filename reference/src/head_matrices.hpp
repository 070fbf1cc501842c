#pragma once
// Private helpers shared by the reference implementations: argument checks and copying one head of a
// strided tensor into a dense row-major Eigen matrix (any strides, including non-unit stride_dim).
#include <Eigen/Dense>
#include <cstdint>

#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::reference::detail {

template <typename Scalar>
using RowMatrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Query rows per score block: bounds the score matrix to 256 x Nk values (8 MiB of doubles at Nk = 4096)
/// however long the query sequence is.
constexpr std::int64_t kRowsPerChunk = 256;

/// Throws std::invalid_argument when the shapes are not a valid problem or (b, h) is out of range.
void check_problem(const Problem& p);
void check_head(const Problem& p, std::int64_t b, std::int64_t h);

/// The kv head that query head h reads (GQA / MQA).
inline std::int64_t kv_head(const Problem& p, std::int64_t h) {
  return h / (p.heads_q / p.heads_kv);
}

/// Index of (b, h, i) in the contiguous [B, Hq, Nq] lse array.
inline std::int64_t lse_index(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i) {
  return (b * p.heads_q + h) * p.seqlen_q + i;
}

/// Rows [row_begin, row_begin + rows) of head (b, h), converted to Scalar.
template <typename Scalar>
RowMatrix<Scalar> load_rows(const HostTensor<const double>& t, std::int64_t b, std::int64_t h,
                            std::int64_t row_begin, std::int64_t rows, std::int64_t head_dim) {
  RowMatrix<Scalar> m(rows, head_dim);
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t d = 0; d < head_dim; ++d) m(n, d) = static_cast<Scalar>(t.at(b, row_begin + n, h, d));
  return m;
}

}  // namespace flashrtc::reference::detail

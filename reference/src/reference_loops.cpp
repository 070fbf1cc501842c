// Attention as plain loops straight from the definition, sharing no arithmetic with the Eigen
// reference it checks.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "head_matrices.hpp"

namespace flashrtc::reference {

void forward_loops(const Problem& p, const HostTensor<const double>& q, const HostTensor<const double>& k,
                   const HostTensor<const double>& v, const HostTensor<double>& o, double* lse) {
  detail::check_problem(p);
  // The check of forward()'s plain attention: refused rather than computed without the variants.
  if (p.has_variants()) throw std::invalid_argument("reference: forward_loops takes no variants");
  const double scale = p.effective_scale();
  const std::int64_t group = p.heads_q / p.heads_kv;
  std::vector<double> weight(static_cast<std::size_t>(p.seqlen_kv));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
        const std::int64_t hk = h / group;
        bool any_visible = false;
        double max_score = 0;
        for (std::int64_t j = 0; j < p.seqlen_kv; ++j) {
          if (!mask_allows(p.mask, i, j, p.seqlen_q, p.seqlen_kv)) continue;
          double dot = 0;
          for (std::int64_t d = 0; d < p.head_dim; ++d) dot += q.at(b, i, h, d) * k.at(b, j, hk, d);
          weight[j] = scale * dot;
          max_score = any_visible ? std::max(max_score, weight[j]) : weight[j];
          any_visible = true;
        }
        double sum = 0;
        for (std::int64_t j = 0; j < p.seqlen_kv; ++j) {
          weight[j] =
              mask_allows(p.mask, i, j, p.seqlen_q, p.seqlen_kv) ? std::exp(weight[j] - max_score) : 0.0;
          sum += weight[j];
        }
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          double acc = 0;
          for (std::int64_t j = 0; j < p.seqlen_kv; ++j) acc += weight[j] * v.at(b, j, hk, d);
          o.at(b, i, h, d) = any_visible ? acc / sum : 0.0;
        }
        if (lse)
          lse[(b * p.heads_q + h) * p.seqlen_q + i] =
              any_visible ? max_score + std::log(sum) : -std::numeric_limits<double>::infinity();
      }
}

}  // namespace flashrtc::reference

// Problem's derived values and the argument checks every reference entry point runs first.
#include <cmath>
#include <stdexcept>
#include <string>

#include "head_matrices.hpp"

namespace flashrtc::reference {

double Problem::effective_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

namespace detail {

void check_problem(const Problem& p) {
  if (p.batch < 1 || p.seqlen_q < 1 || p.seqlen_kv < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.head_dim < 1)
    throw std::invalid_argument("reference: every extent must be at least 1");
  if (p.heads_q % p.heads_kv != 0)
    throw std::invalid_argument("reference: heads_q (" + std::to_string(p.heads_q) +
                                ") must be a multiple of heads_kv (" + std::to_string(p.heads_kv) + ")");
}

void check_head(const Problem& p, std::int64_t b, std::int64_t h) {
  check_problem(p);
  if (b < 0 || b >= p.batch || h < 0 || h >= p.heads_q)
    throw std::invalid_argument("reference: (batch, head) = (" + std::to_string(b) + ", " +
                                std::to_string(h) + ") is out of range");
}

}  // namespace detail
}  // namespace flashrtc::reference

// Problem's derived values and the argument checks every reference entry point runs first.
#include <cmath>
#include <stdexcept>
#include <string>

#include "head_matrices.hpp"
#include "variants.hpp"

namespace flashrtc::reference {

double Problem::effective_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

bool Problem::has_variants() const {
  return window_left != -1 || window_right != -1 || softcap != 0 || !alibi_slopes.empty() || !sinks.empty();
}

namespace detail {

double alibi_slope(const Problem& p, std::int64_t b, std::int64_t h) {
  if (p.alibi_slopes.empty()) return 0;
  const bool per_batch = static_cast<std::int64_t>(p.alibi_slopes.size()) != p.heads_q;
  return p.alibi_slopes[static_cast<std::size_t>((per_batch ? b * p.heads_q : 0) + h)];
}

void check_variants(const Problem& p) {
  if (p.window_left < -1 || p.window_right < -1)
    throw std::invalid_argument("reference: window_left and window_right must be >= -1 (-1: unbounded)");
  if (!std::isfinite(p.softcap) || p.softcap < 0)
    throw std::invalid_argument("reference: softcap must be finite and >= 0 (0: off)");
  const auto n = static_cast<std::int64_t>(p.alibi_slopes.size());
  if (n != 0 && n != p.heads_q && n != p.batch * p.heads_q)
    throw std::invalid_argument("reference: alibi_slopes must hold heads_q or batch * heads_q values");
  if (!p.sinks.empty() && static_cast<std::int64_t>(p.sinks.size()) != p.heads_q)
    throw std::invalid_argument("reference: sinks must hold heads_q values");
}

void check_problem(const Problem& p) {
  if (p.batch < 1 || p.seqlen_q < 1 || p.seqlen_kv < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.head_dim < 1)
    throw std::invalid_argument("reference: every extent must be at least 1");
  if (p.heads_q % p.heads_kv != 0)
    throw std::invalid_argument("reference: heads_q (" + std::to_string(p.heads_q) +
                                ") must be a multiple of heads_kv (" + std::to_string(p.heads_kv) + ")");
  check_variants(p);
}

void check_head(const Problem& p, std::int64_t b, std::int64_t h) {
  check_problem(p);
  if (b < 0 || b >= p.batch || h < 0 || h >= p.heads_q)
    throw std::invalid_argument("reference: (batch, head) = (" + std::to_string(b) + ", " +
                                std::to_string(h) + ") is out of range");
}

}  // namespace detail
}  // namespace flashrtc::reference

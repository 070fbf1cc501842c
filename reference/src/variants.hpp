#pragma once
// Private: the attention variants of a reference Problem (flashrtc/attention_variants.hpp's semantics), one
// implementation for the double and the input-precision references.
#include <cmath>
#include <cstdint>

#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::reference::detail {

/// Whether key j (0 <= j < seqlen_kv) is visible to query i: the library's own rule (flashrtc::mask_allows,
/// the mask and the window bounds).
inline bool visible(const Problem& p, std::int64_t i, std::int64_t j) {
  return mask_allows(p.mask, i, j, p.seqlen_q, p.seqlen_kv, p.window_left, p.window_right);
}

/// slope(b, h), 0 without ALiBi.
double alibi_slope(const Problem& p, std::int64_t b, std::int64_t h);

/// The score of a visible key from raw = scale * q.k: softcap, then ALiBi. Real is double or float (the
/// input-precision reference's arithmetic).
template <typename Real>
Real score(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j, Real raw) {
  Real s = raw;
  if (p.softcap > 0) {
    const Real cap = static_cast<Real>(p.softcap);
    s = cap * std::tanh(raw / cap);
  }
  if (!p.alibi_slopes.empty()) {
    const std::int64_t distance = i + mask_diagonal(p.mask, p.seqlen_q, p.seqlen_kv) - j;
    s -= static_cast<Real>(alibi_slope(p, b, h)) * static_cast<Real>(distance < 0 ? -distance : distance);
  }
  return s;
}

/// d score / d raw: 1 - tanh^2(raw / softcap) with a softcap, else 1 (the slopes are constants).
template <typename Real>
Real score_derivative(const Problem& p, Real raw) {
  if (!(p.softcap > 0)) return Real(1);
  const Real t = std::tanh(raw / static_cast<Real>(p.softcap));
  return Real(1) - t * t;
}

/// Throws std::invalid_argument for an invalid variant (check_problem runs it).
void check_variants(const Problem& p);

}  // namespace flashrtc::reference::detail

#pragma once
// Random attention problems for the CPU reference suites: q, k, v in either layout filled from a seeded
// normal distribution, outputs poisoned with NaN so that an element nobody writes fails every comparison.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::testing {

enum class RefLayout { kBnhd, kBhnd };

inline const char* layout_name(RefLayout layout) {
  return layout == RefLayout::kBnhd ? "bnhd" : "bhnd";
}

inline const char* mask_name(MaskKind mask) {
  switch (mask) {
    case MaskKind::kNone:
      return "none";
    case MaskKind::kCausalTopLeft:
      return "causal";
    case MaskKind::kCausalBottomRight:
      return "causal-br";
  }
  return "?";
}

constexpr MaskKind kAllMasks[] = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};

/// One [B, N, H, d] tensor stored in `layout`, owning its values.
struct OwnedTensor {
  std::vector<double> values;
  std::int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;

  OwnedTensor(std::int64_t batch, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim,
              RefLayout layout, double fill = std::numeric_limits<double>::quiet_NaN())
      : values(static_cast<std::size_t>(batch * seqlen * heads * head_dim), fill) {
    stride_batch = seqlen * heads * head_dim;
    stride_seq = layout == RefLayout::kBnhd ? heads * head_dim : head_dim;
    stride_head = layout == RefLayout::kBnhd ? head_dim : seqlen * head_dim;
  }
  reference::HostTensor<double> view() { return {values.data(), stride_batch, stride_seq, stride_head, 1}; }
  reference::HostTensor<const double> cview() const {
    return {values.data(), stride_batch, stride_seq, stride_head, 1};
  }
  void fill_normal(std::mt19937& rng, double stddev = 1.0) {
    std::normal_distribution<double> normal(0.0, stddev);
    for (double& x : values) x = normal(rng);
  }
};

/// A problem with every shape field given (no scale: the default 1/sqrt(d)).
inline reference::Problem make_reference_problem(std::int64_t batch, std::int64_t heads_q,
                                                 std::int64_t heads_kv, std::int64_t seqlen_q,
                                                 std::int64_t seqlen_kv, std::int64_t head_dim, MaskKind mask,
                                                 std::optional<double> scale = std::nullopt) {
  reference::Problem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_kv = seqlen_kv;
  p.head_dim = head_dim;
  p.mask = mask;
  p.scale = scale;
  return p;
}

/// Inputs of one problem, random normal, in one layout.
struct Inputs {
  reference::Problem problem;
  OwnedTensor q, k, v;
  Inputs(const reference::Problem& p, RefLayout layout, std::uint32_t seed)
      : problem(p),
        q(p.batch, p.seqlen_q, p.heads_q, p.head_dim, layout),
        k(p.batch, p.seqlen_kv, p.heads_kv, p.head_dim, layout),
        v(p.batch, p.seqlen_kv, p.heads_kv, p.head_dim, layout) {
    std::mt19937 rng(seed);
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
  }
};

/// o (always [B, Nq, Hq, d]) and lse, NaN until written.
struct Outputs {
  OwnedTensor o;
  std::vector<double> lse;
  explicit Outputs(const reference::Problem& p)
      : o(p.batch, p.seqlen_q, p.heads_q, p.head_dim, RefLayout::kBnhd),
        lse(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q),
            std::numeric_limits<double>::quiet_NaN()) {}
};

/// max |a - b| / max(|b|, 1e-300) over elements, NaN anywhere gives +inf, equal infinities count as exact.
inline double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double max_diff = 0, max_b = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
    max_b = std::max(max_b, std::fabs(b[i]));
  }
  return max_diff / std::max(max_b, 1e-300);
}

inline std::string describe(const reference::Problem& p, RefLayout layout) {
  return std::string("mask=") + mask_name(p.mask) + " B=" + std::to_string(p.batch) +
         " Hq=" + std::to_string(p.heads_q) + " Hkv=" + std::to_string(p.heads_kv) +
         " Nq=" + std::to_string(p.seqlen_q) + " Nk=" + std::to_string(p.seqlen_kv) +
         " d=" + std::to_string(p.head_dim) +
         " scale=" + (p.scale ? std::to_string(*p.scale) : std::string("default")) + " " +
         layout_name(layout);
}

}  // namespace flashrtc::testing

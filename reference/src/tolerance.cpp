// The tolerance rule (Comparison in attention_reference.hpp): a kernel may be off the double reference by twice what the same computation at
// the kernel's input precision is off, plus a floor relative to the data's magnitude.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::reference {

Comparison compare(const double* got, const double* ref, const double* ref_input_precision, std::int64_t n,
                   double abs_floor, double floor_magnitude) {
  Comparison c;
  c.count = n;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(ref[i])) {
      // Only an infinity the kernel reproduces exactly (lse = -inf of a fully masked row) is a match.
      if (std::isnan(ref[i]) || got[i] != ref[i]) ++c.non_finite;
      continue;
    }
    c.max_abs_reference = std::max(c.max_abs_reference, std::fabs(ref[i]));
    // A non-finite input-precision value would make the budget infinite and pass anything; leaving it out
    // only tightens the rule.
    if (std::isfinite(ref_input_precision[i]))
      c.budget_abs_error = std::max(c.budget_abs_error, std::fabs(ref_input_precision[i] - ref[i]));
    if (!std::isfinite(got[i])) {
      ++c.non_finite;
      continue;
    }
    const double error = std::fabs(got[i] - ref[i]);
    if (c.worst_index < 0 || error > c.max_abs_error) {
      c.max_abs_error = error;
      c.worst_index = i;
    }
  }
  c.allowed = 2 * c.budget_abs_error + abs_floor * std::max(c.max_abs_reference, floor_magnitude);
  c.pass = c.non_finite == 0 && c.max_abs_error <= c.allowed;
  return c;
}

Comparison compare_forward_o(const double* got, const double* ref, const double* ref_input_precision,
                             std::int64_t n, const std::vector<double>& v, double abs_floor) {
  double max_abs_v = 0;
  for (double x : v)
    if (std::isfinite(x)) max_abs_v = std::max(max_abs_v, std::fabs(x));
  return compare(got, ref, ref_input_precision, n, abs_floor, max_abs_v);
}

Comparison compare_forward_lse(const double* got, const double* ref, const double* ref_input_precision,
                               std::int64_t n, double abs_floor) {
  return compare(got, ref, ref_input_precision, n, abs_floor, 1.0);
}

std::string Comparison::summary() const {
  char line[256];
  std::snprintf(line, sizeof line,
                "max_abs_err=%.1e budget=%.1e allowed=%.1e (max|ref|=%.2g, n=%lld, worst at %lld)",
                max_abs_error, budget_abs_error, allowed, max_abs_reference, static_cast<long long>(count),
                static_cast<long long>(worst_index));
  std::string text = line;
  if (non_finite > 0) text += " non_finite=" + std::to_string(non_finite);
  return text + (pass ? " PASS" : " FAIL");
}

GradientComparison compare_gradients(const Gradients& got, const Gradients& ref,
                                     const Gradients& ref_input_precision, double abs_floor) {
  double magnitude = 0;
  for (const std::vector<double>* g : {&ref.dq, &ref.dk, &ref.dv})
    for (double x : *g)
      if (std::isfinite(x)) magnitude = std::max(magnitude, std::fabs(x));
  const auto one = [&](const std::vector<double>& a, const std::vector<double>& r,
                       const std::vector<double>& l) {
    if (a.size() != r.size() || l.size() != r.size())
      throw std::invalid_argument("reference: compare_gradients needs equally sized gradients");
    return compare(a.data(), r.data(), l.data(), static_cast<std::int64_t>(r.size()), abs_floor, magnitude);
  };
  return {one(got.dq, ref.dq, ref_input_precision.dq), one(got.dk, ref.dk, ref_input_precision.dk),
          one(got.dv, ref.dv, ref_input_precision.dv)};
}

std::string GradientComparison::summary() const {
  return "dq: " + dq.summary() + "\ndk: " + dk.summary() + "\ndv: " + dv.summary();
}

}  // namespace flashrtc::reference

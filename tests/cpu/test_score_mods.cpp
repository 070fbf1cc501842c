// score_mods.cuh, the kernels' softcap in the log2 domain, against the spec's definition in double: the
// capped score times ln 2 is softcap * tanh(scale * q.k / softcap), and softcap_derivative is its derivative
// with respect to scale * q.k (a central difference), for small, large and negative scales and huge softcaps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "flashrtc/score_mods.cuh"

using namespace flashrtc;

namespace {

double capped(double scale, double softcap, double qk) {
  return softcap * std::tanh(scale * qk / softcap);
}

}  // namespace

TEST_CASE("softcap_log2 is the capped score in the log2 domain") {
  static_assert(softcap_factors(0.125, 50.0).pre == static_cast<float>(0.125 / 50.0),
                "scale inside the tanh");
  static_assert(softcap_factors(0.125, 50.0).post == static_cast<float>(50.0 * 1.4426950408889634),
                "log2(e) outside it");
  for (double scale : {0.125, 0.0883883476, 1.0, -0.5})
    for (double softcap : {0.5, 30.0, 50.0, 1e6})
      for (double qk : {-400.0, -3.0, -0.01, 0.0, 0.7, 12.0, 250.0, 1e5}) {
        const Softcap cap = softcap_factors(scale, softcap);
        const double expected = capped(scale, softcap, qk);
        const double got = softcap_log2<true>(cap, static_cast<float>(qk)) / 1.4426950408889634;
        INFO("scale " << scale << ", softcap " << softcap << ", q.k " << qk);
        // Rounded pre and post, two fp32 products and a float tanh: a few ulps of the score.
        CHECK(std::abs(got - expected) <= 1e-6 * std::abs(expected));
        CHECK(std::abs(got) <= softcap * (1 + 1e-6));
      }
}

TEST_CASE("softcap_derivative is d capped score / d (scale q.k)") {
  for (double scale : {0.125, 1.0})
    for (double softcap : {0.5, 30.0})
      for (double qk : {-40.0, -1.0, 0.0, 0.3, 5.0, 100.0}) {
        const double raw = scale * qk, h = 1e-6 * std::max(1.0, std::abs(raw));
        const double numeric = (capped(1.0, softcap, raw + h) - capped(1.0, softcap, raw - h)) / (2 * h);
        const Softcap cap = softcap_factors(scale, softcap);
        const float t = softcap_tanh<false>(cap.pre * static_cast<float>(qk));
        INFO("scale " << scale << ", softcap " << softcap << ", q.k " << qk);
        CHECK(softcap_derivative(t) == doctest::Approx(numeric).epsilon(1e-5));
        // The same from the log2-domain score alone: t = s / post.
        CHECK(softcap_derivative(softcap_log2<false>(cap, static_cast<float>(qk)) / cap.post) ==
              doctest::Approx(numeric).epsilon(1e-5));
      }
}

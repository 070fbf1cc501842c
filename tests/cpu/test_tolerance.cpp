// The pieces of the tolerance rule (flashrtc_reference::Comparison): fp16/bf16 rounding, the input-precision reference whose error is
// the budget, and compare() itself.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/reference_problem.hpp"

using namespace flashrtc;
using flashrtc::reference::Problem;
using flashrtc::testing::Inputs;
using flashrtc::testing::Outputs;
using flashrtc::testing::RefLayout;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

float half(std::uint16_t bits) {
  return reference::half_bits_to_float(bits);
}
float bf16(std::uint16_t bits) {
  return reference::bf16_bits_to_float(bits);
}
std::uint16_t to_half(float x) {
  return reference::float_to_half_bits(x);
}
std::uint16_t to_bf16(float x) {
  return reference::float_to_bf16_bits(x);
}

bool is_half_nan(std::uint16_t bits) {
  return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0;
}
bool is_bf16_nan(std::uint16_t bits) {
  return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0;
}

}  // namespace

TEST_CASE("fp16 rounding on known values") {
  CHECK(to_half(1.0f) == 0x3c00);
  CHECK(to_half(-2.0f) == 0xc000);
  CHECK(to_half(-0.0f) == 0x8000);
  CHECK(to_half(65504.0f) == 0x7bff);                        // largest half
  CHECK(to_half(std::nextafter(65520.0f, 0.0f)) == 0x7bff);  // just below the tie: rounds down
  CHECK(to_half(65520.0f) == 0x7c00);                        // the tie goes to even, which is infinity
  CHECK(to_half(-1e6f) == 0xfc00);
  CHECK(to_half(kInfF) == 0x7c00);
  CHECK(to_half(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(to_half(std::ldexp(1.0f, -25)) == 0x0000);  // half of it: tie to even (zero)
  CHECK(to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(to_half(std::ldexp(3.0f, -25)) == 0x0002);                          // 1.5 units: tie to even (2)
  CHECK(to_half(std::ldexp(5.0f, -25)) == 0x0002);                          // 2.5 units: tie to even (2)
  CHECK(to_half(std::ldexp(1.0f, -14)) == 0x0400);                          // smallest normal
  CHECK(to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);  // tie between 0x3ff and 0x400
  CHECK(to_half(std::ldexp(1.0f, -130)) == 0x0000);                         // a float subnormal
  CHECK(to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);                   // tie to even (down)
  CHECK(to_half(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);                   // tie to even (up)
  CHECK(to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(half(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(half(0x3555) == 0.333251953125f);
  CHECK(half(0x7bff) == 65504.0f);
  CHECK(half(0xfc00) == -kInfF);
  CHECK(std::signbit(half(0x8000)));
  CHECK(std::isnan(half(0x7e00)));
  CHECK(is_half_nan(to_half(std::numeric_limits<float>::quiet_NaN())));
  CHECK(is_half_nan(to_half(-std::numeric_limits<float>::quiet_NaN())));
  CHECK(is_half_nan(to_half(std::numeric_limits<float>::signaling_NaN())));
}

TEST_CASE("bf16 rounding on known values") {
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(to_bf16(-1.0f) == 0xbf80);
  CHECK(to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie to even (down)
  CHECK(to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);  // tie to even (up)
  CHECK(to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 0x3f81);
  CHECK(to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // beyond the largest bf16 + half an ulp
  CHECK(to_bf16(-kInfF) == 0xff80);
  CHECK(to_bf16(std::ldexp(1.0f, -133)) == 0x0001);  // smallest bf16 subnormal
  CHECK(to_bf16(std::ldexp(1.0f, -134)) == 0x0000);  // half of it: tie to even
  CHECK(to_bf16(std::ldexp(3.0f, -134)) == 0x0002);  // 1.5 units: tie to even
  CHECK(to_bf16(std::ldexp(1.0f, -149)) == 0x0000);  // smallest float subnormal
  CHECK(bf16(0x3f80) == 1.0f);
  CHECK(bf16(0x7f7f) == std::ldexp(255.0f, 120));  // largest bf16
  CHECK(is_bf16_nan(to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(is_bf16_nan(to_bf16(std::numeric_limits<float>::signaling_NaN())));
  // A NaN whose payload lives only in the low 16 bits must not truncate to infinity.
  std::uint32_t low_payload_nan = 0x7f800001u;
  float f;
  std::memcpy(&f, &low_payload_nan, sizeof f);
  CHECK(is_bf16_nan(to_bf16(f)));
  CHECK(std::isnan(bf16(0xffc0)));
}

TEST_CASE("every 16-bit pattern round-trips and every midpoint ties to even") {
  int checked = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    if (is_half_nan(b)) {
      CHECK(is_half_nan(to_half(half(b))));
    } else {
      REQUIRE(to_half(half(b)) == b);
    }
    if (is_bf16_nan(b)) {
      CHECK(is_bf16_nan(to_bf16(bf16(b))));
    } else {
      REQUIRE(to_bf16(bf16(b)) == b);
    }
  }
  // Between consecutive positive finite values lo < hi (bits b, b + 1): the exact midpoint goes to the even
  // pattern, anything off it to the nearer one. Midpoints are exact floats: float has 13 (16) more bits.
  for (std::uint16_t b = 0; b < 0x7bff; ++b) {
    const float lo = half(b), hi = half(static_cast<std::uint16_t>(b + 1));
    const float mid = lo + (hi - lo) / 2;
    REQUIRE(to_half(mid) == ((b & 1u) ? b + 1 : b));
    REQUIRE(to_half(std::nextafter(mid, 0.0f)) == b);
    REQUIRE(to_half(std::nextafter(mid, kInfF)) == b + 1);
    REQUIRE(to_half(-mid) == (0x8000u | ((b & 1u) ? b + 1u : b)));
    ++checked;
  }
  for (std::uint16_t b = 0; b < 0x7f7f; ++b) {
    const float lo = bf16(b), hi = bf16(static_cast<std::uint16_t>(b + 1));
    const float mid = lo + (hi - lo) / 2;
    REQUIRE(to_bf16(mid) == ((b & 1u) ? b + 1 : b));
    REQUIRE(to_bf16(std::nextafter(mid, 0.0f)) == b);
    REQUIRE(to_bf16(std::nextafter(mid, kInfF)) == b + 1);
    ++checked;
  }
  CHECK(checked == 0x7bff + 0x7f7f);
}

TEST_CASE("round_to rounds a double once, not twice through float") {
  // 1 + 2^-11 + 2^-40 is just above the fp16 tie between 1 and 1 + 2^-10; through float it would become the
  // tie itself and round down to 1.
  CHECK(reference::round_to(DType::kFloat16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) ==
        1.0 + std::ldexp(1.0, -10));
  CHECK(reference::round_to(DType::kBFloat16, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)) ==
        1.0 + std::ldexp(1.0, -7));
  CHECK(reference::round_to(DType::kFloat16, 1.0 + std::ldexp(1.0, -11)) == 1.0);
  CHECK(reference::round_to(DType::kFloat32, 1.0 + std::ldexp(1.0, -40)) == 1.0);
  CHECK(reference::round_to(DType::kFloat16, 1e6) == kInf);
  CHECK(reference::round_to(DType::kBFloat16, -1e300) == -kInf);
  CHECK(reference::round_to(DType::kBFloat16, 0.1) == bf16(0x3dcd));
  CHECK(std::isnan(reference::round_to(DType::kFloat16, kNaN)));
}

namespace {

struct PrecisionError {
  double o_relative, lse_relative;
  bool outputs_representable;
};

// Input-precision reference vs double reference on the same inputs (already rounded to dtype).
PrecisionError input_precision_error(DType dtype, const Problem& p, std::uint32_t seed,
                                     Outputs* low_out = nullptr) {
  Inputs in(p, RefLayout::kBnhd, seed);
  for (auto* t : {&in.q, &in.k, &in.v})
    for (double& x : t->values) x = reference::round_to(dtype, x);
  Outputs ref(p), low(p);
  reference::forward(p, in.q.cview(), in.k.cview(), in.v.cview(), ref.o.view(), ref.lse.data());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      reference::forward_head_input_precision(p, dtype, b, h, in.q.cview(), in.k.cview(), in.v.cview(),
                                              low.o.view(), low.lse.data());
  bool representable = true;
  for (double x : low.o.values) representable = representable && reference::round_to(dtype, x) == x;
  PrecisionError e{testing::max_relative_difference(low.o.values, ref.o.values),
                   testing::max_relative_difference(low.lse, ref.lse), representable};
  if (low_out) *low_out = low;
  return e;
}

Problem precision_problem(MaskKind mask) {
  Problem p;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 100;
  p.seqlen_kv = 300;
  p.head_dim = 64;
  p.mask = mask;
  return p;
}

}  // namespace

TEST_CASE("input-precision reference: fp32 is close, fp16 further, bf16 furthest") {
  for (MaskKind mask : testing::kAllMasks) {
    const Problem p = precision_problem(mask);
    const PrecisionError fp32 = input_precision_error(DType::kFloat32, p, 600);
    const PrecisionError fp16 = input_precision_error(DType::kFloat16, p, 600);
    const PrecisionError bf16e = input_precision_error(DType::kBFloat16, p, 600);
    INFO("mask=" << testing::mask_name(mask) << " fp32 " << fp32.o_relative << "/" << fp32.lse_relative
                 << " fp16 " << fp16.o_relative << " bf16 " << bf16e.o_relative);
    CHECK(fp32.o_relative < 1e-5);
    CHECK(fp32.lse_relative < 1e-5);
    CHECK(fp32.o_relative > 0);  // it really computes in float
    CHECK(fp16.o_relative > 4 * fp32.o_relative);
    CHECK(bf16e.o_relative > 4 * fp16.o_relative);
    // Rounding P and o to 11 (8) significant bits costs a few units of 2^-11 (2^-8), not more.
    CHECK(fp16.o_relative < 4e-3);
    CHECK(bf16e.o_relative < 3e-2);
    // lse never passes through the element type.
    CHECK(fp16.lse_relative < 1e-5);
    CHECK(bf16e.lse_relative < 1e-5);
    CHECK(fp32.outputs_representable);
    CHECK(fp16.outputs_representable);
    CHECK(bf16e.outputs_representable);
  }
}

TEST_CASE("input-precision reference rounds P before P V, not only the output") {
  // Without P rounded, fp16's result would be the fp32 result rounded to fp16.
  const Problem p = precision_problem(MaskKind::kNone);
  Outputs fp32_out(p), fp16_out(p);
  input_precision_error(DType::kFloat32, p, 700, &fp32_out);
  input_precision_error(DType::kFloat16, p, 700, &fp16_out);
  // Inputs differ by their rounding to fp16, so compare against fp32 computed on the fp16-rounded inputs.
  Inputs in(p, RefLayout::kBnhd, 700);
  for (auto* t : {&in.q, &in.k, &in.v})
    for (double& x : t->values) x = reference::round_to(DType::kFloat16, x);
  Outputs fp32_on_fp16_inputs(p);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      reference::forward_head_input_precision(p, DType::kFloat32, b, h, in.q.cview(), in.k.cview(),
                                              in.v.cview(), fp32_on_fp16_inputs.o.view(), nullptr);
  std::int64_t differing = 0;
  for (std::size_t i = 0; i < fp16_out.o.values.size(); ++i)
    differing +=
        reference::round_to(DType::kFloat16, fp32_on_fp16_inputs.o.values[i]) != fp16_out.o.values[i];
  CHECK(differing > 0);
}

TEST_CASE("input-precision reference: fully masked rows give o = 0 and lse = -inf") {
  Problem p = precision_problem(MaskKind::kCausalBottomRight);
  p.seqlen_q = 300;
  p.seqlen_kv = 100;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    Outputs low(p);
    const PrecisionError e = input_precision_error(dtype, p, 800, &low);
    CHECK(e.o_relative < 3e-2);  // finite: masked rows matched the reference's -inf and zeros
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        for (std::int64_t i = 0; i < p.seqlen_q - p.seqlen_kv; ++i) {
          CHECK(low.lse[(b * p.heads_q + h) * p.seqlen_q + i] == -kInf);
          CHECK(low.o.cview().at(b, i, h, 7) == 0.0);
        }
  }
}

namespace {

// A reference, an input-precision reference off by up to kBudget, and a copy of the reference to perturb.
struct CompareFixture {
  static constexpr double kBudget = 1e-4;
  std::vector<double> ref, low, got;
  explicit CompareFixture(std::int64_t n = 4096) : ref(n), low(n), got(n) {
    std::mt19937 rng(900);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> noise(-kBudget, kBudget);
    for (std::int64_t i = 0; i < n; ++i) {
      ref[i] = normal(rng);
      low[i] = ref[i] + noise(rng);
    }
    low[123] = ref[123] + kBudget;  // makes the budget exactly kBudget
    got = ref;
  }
  reference::Comparison run(double abs_floor = 1e-6) const {
    return reference::compare(got.data(), ref.data(), low.data(), static_cast<std::int64_t>(ref.size()),
                              abs_floor);
  }
};

}  // namespace

TEST_CASE("compare: the budget, the floor and the verdict") {
  CompareFixture f;
  reference::Comparison c = f.run();
  CHECK(c.pass);
  CHECK(c.max_abs_error == 0.0);
  CHECK(c.budget_abs_error == doctest::Approx(CompareFixture::kBudget).epsilon(1e-9));
  CHECK(c.allowed == doctest::Approx(2 * c.budget_abs_error + 1e-6 * c.max_abs_reference));
  CHECK(c.max_abs_reference > 2.0);
  CHECK(c.count == 4096);
  CHECK(c.non_finite == 0);

  f.got[777] += 1.9 * CompareFixture::kBudget;  // within twice the budget
  c = f.run();
  CHECK(c.pass);
  CHECK(c.worst_index == 777);
  CHECK(c.max_abs_error == doctest::Approx(1.9 * CompareFixture::kBudget));

  f.got[2000] -= 2.1 * CompareFixture::kBudget + 1e-6 * c.max_abs_reference;  // beyond budget and floor
  c = f.run();
  CHECK_FALSE(c.pass);
  CHECK(c.worst_index == 2000);
  CHECK(c.summary().find("FAIL") != std::string::npos);

  // With a zero budget only the floor remains: abs_floor * max|ref|.
  CompareFixture exact;
  exact.low = exact.ref;
  const double floor = 1e-6 * exact.run().max_abs_reference;
  exact.got[5] += 0.9 * floor;
  CHECK(exact.run().pass);
  exact.got[5] += 0.2 * floor;
  CHECK_FALSE(exact.run().pass);
  CHECK(exact.run(1e-5).pass);
}

TEST_CASE("compare: NaN and infinities") {
  {
    CompareFixture f;
    f.got[10] = kNaN;
    const reference::Comparison c = f.run();
    CHECK_FALSE(c.pass);
    CHECK(c.non_finite == 1);
    CHECK(c.summary().find("non_finite=1") != std::string::npos);
  }
  {
    CompareFixture f;
    f.got[10] = kInf;
    CHECK_FALSE(f.run().pass);
  }
  {
    // lse of fully masked rows: -inf in every reference and in got is a match.
    CompareFixture f;
    for (std::size_t i : {0u, 1u, 4095u}) f.ref[i] = f.low[i] = f.got[i] = -kInf;
    const reference::Comparison c = f.run();
    CHECK(c.pass);
    CHECK(c.non_finite == 0);
    CHECK(std::isfinite(c.max_abs_reference));
    // ...but a finite value, +inf or NaN where the reference has -inf is not.
    for (double wrong : {0.0, kInf, kNaN}) {
      CompareFixture g = f;
      g.got[1] = wrong;
      CHECK_FALSE(g.run().pass);
    }
    // Nor is -inf where the reference is finite.
    CompareFixture g = f;
    g.got[2] = -kInf;
    CHECK_FALSE(g.run().pass);
  }
  {
    // A broken input-precision value must not inflate the budget into passing everything.
    CompareFixture f;
    f.low[50] = kNaN;
    f.low[51] = kInf;
    f.got[52] += 1.0;
    const reference::Comparison c = f.run();
    CHECK(std::isfinite(c.allowed));
    CHECK_FALSE(c.pass);
  }
}

TEST_CASE("compare: summary line") {
  CompareFixture f;
  const std::string line = f.run().summary();
  INFO(line);
  CHECK(line.find("max_abs_err=0.0e+00") == 0);
  CHECK(line.find("budget=1.0e-04") != std::string::npos);
  CHECK(line.find("n=4096") != std::string::npos);
  CHECK(line.find("PASS") == line.size() - 4);
}

TEST_CASE("compare_forward_o and compare_forward_lse: floors from what the outputs are computed from") {
  // One row, one visible key: the reference's lse is the scaled score, here near 0, and the input-precision
  // reference happens to be exact. A kernel that summed the score in another order is off by its rounding.
  const double ref = 0.023, got_rounded = ref + 2e-7, got_wrong = ref + 2e-6;
  CHECK_FALSE(reference::compare(&got_rounded, &ref, &ref, 1).pass);  // a floor of 1e-6 x |lse| = 2.3e-8
  CHECK(reference::compare_forward_lse(&got_rounded, &ref, &ref, 1).pass);  // 1e-6 x max(|lse|, 1)
  CHECK_FALSE(reference::compare_forward_lse(&got_wrong, &ref, &ref, 1).pass);
  const double big = 40.0, big_got = big + 3e-5;  // a large lse keeps its relative floor: 4e-5
  CHECK(reference::compare_forward_lse(&big_got, &big, &big, 1).allowed == doctest::Approx(4e-5));
  CHECK(reference::compare_forward_lse(&big_got, &big, &big, 1).pass);

  // o is a mean of v: where it cancels to near 0 the floor follows max|v|.
  const double o_ref = 1e-3, o_got = o_ref + 2e-6;
  CHECK_FALSE(reference::compare(&o_got, &o_ref, &o_ref, 1).pass);
  const std::vector<double> v_large{0.5, -3.0, kNaN}, v_small{1.0, -0.25};
  CHECK(reference::compare_forward_o(&o_got, &o_ref, &o_ref, 1, v_large).pass);
  CHECK(reference::compare_forward_o(&o_got, &o_ref, &o_ref, 1, v_large).allowed == doctest::Approx(3e-6));
  CHECK_FALSE(reference::compare_forward_o(&o_got, &o_ref, &o_ref, 1, v_small).pass);
}

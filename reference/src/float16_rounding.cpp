// fp16 and bf16 conversions in integer arithmetic, so the result does not depend on the FPU's rounding mode
// or flush-to-zero setting: round to nearest even like __float2half_rn / __float2bfloat16_rn.
#include <cmath>
#include <cstring>
#include <limits>

#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::reference {

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to float toward zero with the last bit set when inexact ("round to odd"). Rounding that to a
// format with at least two fewer significand bits gives the correctly rounded result, which rounding twice to
// nearest (double -> float -> half) does not when the first rounding lands on a halfway point.
float to_float_round_to_odd(double x) {
  float f = static_cast<float>(x);
  if (!std::isfinite(x) || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return float_of(bits_of(f) | 1u);
}

}  // namespace

std::uint16_t float_to_half_bits(float x) {
  const std::uint32_t u = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u)  // NaN: keep it quiet, keep the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  // 65520 is halfway between the largest half (65504) and 2^16; the tie goes to the even side, infinity.
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // a normal half (>= 2^-14): rebias the exponent, round off 13 bits
    const std::uint32_t odd = (magnitude >> 13) & 1u;
    const std::uint32_t rebiased = magnitude - (static_cast<std::uint32_t>(127 - 15) << 23);
    // A carry out of the significand correctly bumps the exponent.
    return static_cast<std::uint16_t>(sign | ((rebiased + 0xfffu + odd) >> 13));
  }
  // Subnormal half: the value in units of 2^-24, rounded to nearest even.
  const std::uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25, half of the smallest subnormal (and float subnormals)
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - exponent;  // 14..24
  std::uint32_t result = significand >> shift;
  const std::uint32_t remainder = significand & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;  // may carry into 2^-14: fine
  return static_cast<std::uint16_t>(sign | result);
}

float half_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t significand = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: significand * 2^-24, exact in float
    const float value = std::ldexp(static_cast<float>(significand), -24);
    return sign ? -value : value;
  }
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (significand << 13));
  return float_of(sign | ((exponent + 127 - 15) << 23) | (significand << 13));
}

std::uint16_t float_to_bf16_bits(float x) {
  const std::uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  // bf16 shares float's exponent range, so rounding off the low 16 bits is the whole job, subnormals and
  // overflow to infinity included.
  const std::uint32_t odd = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + odd) >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) {
  return float_of(static_cast<std::uint32_t>(bits) << 16);
}

double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<double>(static_cast<float>(x));
    case DType::kFloat16:
      return half_bits_to_float(float_to_half_bits(to_float_round_to_odd(x)));
    case DType::kBFloat16:
      return bf16_bits_to_float(float_to_bf16_bits(to_float_round_to_odd(x)));
  }
  return x;
}

}  // namespace flashrtc::reference

#pragma once
// One element to and from fp32, for kernels that touch elements one at a time (the backward's row passes).
// PTX cvt instructions, like pack2 (mma.cuh), so that NVRTC needs no toolkit headers.
#include "flashrtc/element_types.cuh"

namespace flashrtc {

__device__ __forceinline__ float to_float(float x) {
  return x;
}

__device__ __forceinline__ float to_float(half_t x) {
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(x.bits));
  return f;
}

__device__ __forceinline__ float to_float(bfloat16_t x) {
  return __uint_as_float(unsigned(x.bits) << 16);
}

// Round to nearest even.
template <typename T>
__device__ __forceinline__ T from_float(float x);

template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}

template <>
__device__ __forceinline__ half_t from_float<half_t>(float x) {
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(bits) : "f"(x));
  return half_t{bits};
}

template <>
__device__ __forceinline__ bfloat16_t from_float<bfloat16_t>(float x) {
  unsigned short bits;
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(bits) : "f"(x));
  return bfloat16_t{bits};
}

}  // namespace flashrtc

#pragma once
// 16-bit element types with the bit layout of CUDA's __half and __nv_bfloat16, defined here so NVRTC needs
// no toolkit headers at run time (a deployment may ship libnvrtc without the CUDA include directory).
// Conversions use the PTX cvt instructions, round to nearest even.

namespace flashrtc {

struct half_t {
  unsigned short bits;
};
struct bfloat16_t {
  unsigned short bits;
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(half_t x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ float to_float(bfloat16_t x) { return __uint_as_float(static_cast<unsigned>(x.bits) << 16); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ half_t from_float<half_t>(float x) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}
template <>
__device__ __forceinline__ bfloat16_t from_float<bfloat16_t>(float x) {
  bfloat16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}

// Loads N consecutive elements (N * sizeof(T) bytes, naturally aligned) as floats.
template <int N, typename T>
__device__ __forceinline__ void load_as_float(const T* ptr, float (&out)[N]) {
  static_assert(N == 1 || N == 2 || N == 4, "vector width");
  if constexpr (sizeof(T) == 4) {
    if constexpr (N == 4) {
      const float4 x = *reinterpret_cast<const float4*>(ptr);
      out[0] = x.x; out[1] = x.y; out[2] = x.z; out[3] = x.w;
    } else if constexpr (N == 2) {
      const float2 x = *reinterpret_cast<const float2*>(ptr);
      out[0] = x.x; out[1] = x.y;
    } else {
      out[0] = to_float(ptr[0]);
    }
  } else {
    if constexpr (N == 4) {
      const uint2 x = *reinterpret_cast<const uint2*>(ptr);
      out[0] = to_float(T{static_cast<unsigned short>(x.x & 0xffffu)});
      out[1] = to_float(T{static_cast<unsigned short>(x.x >> 16)});
      out[2] = to_float(T{static_cast<unsigned short>(x.y & 0xffffu)});
      out[3] = to_float(T{static_cast<unsigned short>(x.y >> 16)});
    } else if constexpr (N == 2) {
      const unsigned x = *reinterpret_cast<const unsigned*>(ptr);
      out[0] = to_float(T{static_cast<unsigned short>(x & 0xffffu)});
      out[1] = to_float(T{static_cast<unsigned short>(x >> 16)});
    } else {
      out[0] = to_float(ptr[0]);
    }
  }
}

// Stores N floats as N consecutive elements of T (naturally aligned).
template <int N, typename T>
__device__ __forceinline__ void store_from_float(T* ptr, const float (&in)[N]) {
  if constexpr (sizeof(T) == 4) {
    if constexpr (N == 4) {
      *reinterpret_cast<float4*>(ptr) = make_float4(in[0], in[1], in[2], in[3]);
    } else if constexpr (N == 2) {
      *reinterpret_cast<float2*>(ptr) = make_float2(in[0], in[1]);
    } else {
      ptr[0] = from_float<T>(in[0]);
    }
  } else {
    unsigned packed[(N + 1) / 2];
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const unsigned lo = from_float<T>(in[i]).bits;
      const unsigned hi = (i + 1 < N) ? from_float<T>(in[i + 1]).bits : 0u;
      packed[i / 2] = lo | (hi << 16);
    }
    if constexpr (N == 4) {
      *reinterpret_cast<uint2*>(ptr) = make_uint2(packed[0], packed[1]);
    } else if constexpr (N == 2) {
      *reinterpret_cast<unsigned*>(ptr) = packed[0];
    } else {
      ptr[0] = from_float<T>(in[0]);
    }
  }
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flashrtc

#pragma once
// N consecutive floats (N = 1, 2 or 4, naturally aligned) as one vector load or store.

namespace flashrtc {

template <int N>
__device__ __forceinline__ void load_floats(const float* ptr, float (&out)[N]) {
  static_assert(N == 1 || N == 2 || N == 4, "vector width");
  if constexpr (N == 4) {
    const float4 x = *reinterpret_cast<const float4*>(ptr);
    out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w;
  } else if constexpr (N == 2) {
    const float2 x = *reinterpret_cast<const float2*>(ptr);
    out[0] = x.x, out[1] = x.y;
  } else {
    out[0] = ptr[0];
  }
}

template <int N>
__device__ __forceinline__ void store_floats(float* ptr, const float (&in)[N]) {
  static_assert(N == 1 || N == 2 || N == 4, "vector width");
  if constexpr (N == 4)
    *reinterpret_cast<float4*>(ptr) = make_float4(in[0], in[1], in[2], in[3]);
  else if constexpr (N == 2)
    *reinterpret_cast<float2*>(ptr) = make_float2(in[0], in[1]);
  else
    ptr[0] = in[0];
}

}  // namespace flashrtc

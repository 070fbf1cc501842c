#pragma once
// Qualifiers of the functions that NVRTC and the host compiler both compile (the runtime and the CPU tests
// include their headers): NVRTC defines __CUDACC_RTC__; the host compiler sees plain (constexpr) functions.
#ifdef __CUDACC_RTC__
#define FLASHRTC_HOST_DEVICE __host__ __device__
#define FLASHRTC_DEVICE_INLINE __device__ __forceinline__
#else
#define FLASHRTC_HOST_DEVICE
#define FLASHRTC_DEVICE_INLINE inline
#endif

#pragma once
// The qualifier of the device functions that the host compiler compiles too (the CPU tests include their
// headers): NVRTC defines __CUDACC_RTC__; the host compiler sees plain inline (constexpr) functions.
#ifdef __CUDACC_RTC__
#define FLASHRTC_DEVICE_INLINE __device__ __forceinline__
#else
#define FLASHRTC_DEVICE_INLINE inline
#endif

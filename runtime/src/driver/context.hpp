#pragma once
// The context flashrtc works in: the calling thread's current context (the CUDA runtime and PyTorch make
// their device's primary context current), else device 0's primary context, retained and made current.
#include <cuda.h>

#include <mutex>
#include <string>

namespace flashrtc::detail {

struct ContextInfo {
  CUcontext context = nullptr;
  CUdevice device = 0;
  std::string name;  // cuDeviceGetName: part of the tuning database's key
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  int smem_per_block_optin_bytes = 0;
  // flashrtc's stream-ordered scratch pool on this device, made on first use (stream_scratch.cpp); a failed
  // attempt leaves the flag unset, so the next call tries again.
  mutable std::once_flag scratch_pool_made;
  mutable CUmemoryPool scratch_pool = nullptr;
};

// Throws Error(kNoDevice) without a driver or device, Error(kDriver) when a call fails.
const ContextInfo& current_context();

// "sm_90a" for compute capability 9.0 (wgmma and setmaxnreg need the arch-specific target), else "sm_XY".
std::string arch_for(int cc_major, int cc_minor);

}  // namespace flashrtc::detail

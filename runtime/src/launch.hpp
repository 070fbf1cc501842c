#pragma once
// Kernel launches through cuLaunchKernelEx: the one launch call of the runtime, cluster dimensions included.
#include <cuda.h>

namespace flashrtc::detail {

// What one launch needs besides the function and its arguments. Thread block clusters (sm_90 and newer):
// each grid dimension must be a multiple of the cluster's, and clusters of more than 8 blocks need the
// function's CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED; the driver refuses the launch otherwise.
struct LaunchDims {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned cluster[3] = {1, 1, 1};  // 1 x 1 x 1: no cluster attribute is passed
  unsigned dynamic_smem_bytes = 0;  // above 48 KiB only after cuFuncSetAttribute raised the function's limit
};

// Launches f on stream with args (cuLaunchKernelEx's kernelParams: one pointer per kernel parameter).
// Allocates nothing: it runs on every call. Throws Error(kDriver) naming cuLaunchKernelEx, its status and
// the dimensions when the driver refuses the launch; a fault inside the kernel surfaces later, at a sync.
void launch_kernel(CUfunction f, const LaunchDims& dims, CUstream stream, void** args);

}  // namespace flashrtc::detail

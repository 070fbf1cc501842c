#pragma once
// Kernel launches through cuLaunchKernelEx: the one launch call of the runtime, cluster dimensions included.
#include <cuda.h>

#include "flashrtc/launch_shape.hpp"

namespace flashrtc::detail {

// Launches f on stream with args (cuLaunchKernelEx's kernelParams: one pointer per kernel parameter), with
// a cluster-dimension attribute only when shape.cluster is not 1 x 1 x 1. Allocates nothing: it runs on
// every call. Throws Error(kDriver) naming cuLaunchKernelEx, its status and the dimensions when the driver
// refuses the launch; a fault inside the kernel surfaces later, at a synchronization.
void launch_kernel(CUfunction f, const LaunchShape& shape, CUstream stream, void** args);

}  // namespace flashrtc::detail

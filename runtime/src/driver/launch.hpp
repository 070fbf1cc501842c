#pragma once
// Kernel launches through cuLaunchKernelEx: the one launch call of the runtime, cluster dimensions included.
#include <cuda.h>

#include "flashrtc/kernel_launch.hpp"

namespace flashrtc::detail {

// Launches f on stream with args (cuLaunchKernelEx's kernelParams: one pointer per kernel parameter), with
// a cluster-dimension attribute only when shape.cluster is not 1 x 1 x 1. Allocates nothing: it runs on
// every call. Throws Error(kDriver) naming cuLaunchKernelEx, its status and the dimensions when the driver
// refuses the launch; a fault inside the kernel surfaces later, at a synchronization.
void launch_kernel(CUfunction f, const LaunchShape& shape, CUstream stream, void** args);

// A family's launch as its build_launch filled it: where shape.work_buffer_arg names a parameter, first
// allocates shape.work_bytes on stream (freed there after the launch, stream-ordered), zeroes the first
// shape.work_zeroed_bytes there and points the parameter at it; then launch_kernel. Throws Error(kDriver)
// naming the driver call that failed, Error(kInternal) for a buffer the shape describes wrongly.
void launch_family_kernel(CUfunction f, const LaunchShape& shape, CUstream stream, KernelArgs& args);

}  // namespace flashrtc::detail

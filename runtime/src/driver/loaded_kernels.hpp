#pragma once
// Kernels loaded into contexts: one module per (context, cache key), loaded once and kept for the life of the
// process (a module cannot be unloaded while a launch may still use it, and static destruction order would
// put that after the driver's teardown).
#include <cuda.h>

#include <string>

namespace flashrtc::detail {

// The function lowered_name of the cubin whose cache key is key, loaded into context once per (context, key)
// with its dynamic shared memory limit raised to dynamic_smem_bytes. Later calls with the same context and
// key return the first function and read neither cubin nor lowered_name. Throws Error(kDriver) naming the
// driver call that failed (nothing stays loaded then), Error(kNoDevice) without a driver.
CUfunction load_kernel_function(CUcontext context, const std::string& key, const std::string& cubin,
                                const std::string& lowered_name, int dynamic_smem_bytes);

}  // namespace flashrtc::detail

#pragma once
/// The GPU in hand, through the CUDA Driver API loaded at run time.
#include <cstddef>
#include <string>

#include "flashrtc/export.hpp"

namespace flashrtc {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  std::string arch;             ///< what kernels are compiled for: "sm_90a" on Hopper, else "sm_XY"
  int multiprocessors = 0;
  std::size_t smem_per_block_optin_bytes = 0;
  std::size_t global_memory_bytes = 0;
  int driver_version = 0;       ///< e.g. 13000
  std::size_t l2_cache_bytes = 0;
  /// Per-SM limits, for occupancy (tuning_space.hpp).
  int max_threads_per_block = 0, max_threads_per_sm = 0, max_blocks_per_sm = 0, registers_per_sm = 0;
  std::size_t smem_per_sm_bytes = 0, reserved_smem_per_block_bytes = 0;
};

/// True when libcuda.so.1 loads and cuInit succeeds with at least one device. Never throws.
FLASHRTC_API bool device_available();
/// Why device_available() is false ("libcuda.so.1 not found", "cuInit: CUDA_ERROR_NO_DEVICE", ...); empty if true.
FLASHRTC_API std::string device_unavailable_reason();

/// The device of the calling thread's current context, else device 0. Throws Error(kNoDevice) without one.
FLASHRTC_API DeviceInfo current_device();

}  // namespace flashrtc

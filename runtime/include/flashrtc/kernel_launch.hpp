#pragma once
/// One kernel launch as a family's launch builder fills it and the driver layer launches it: its dimensions
/// and its parameters.
#include <cstddef>

#include "flashrtc/export.hpp"

namespace flashrtc {

/// Grid, block and cluster dimensions and dynamic shared memory of one launch. Thread block clusters (sm_90
/// and newer): each grid dimension must be a multiple of the cluster's, and clusters of more than 8 blocks
/// need the function's CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED; the driver refuses the launch
/// otherwise. Dynamic shared memory above 48 KiB needs the function's limit raised (cuFuncSetAttribute).
struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned cluster[3] = {1, 1, 1};  ///< 1 x 1 x 1: launched without a cluster attribute
  unsigned dynamic_smem_bytes = 0;
  /// The index of a kernel parameter of pointer type that the runtime points at a work buffer of its own for
  /// the launch, or -1 for none: work_bytes of device memory on the call's stream, of which the first
  /// work_zeroed_bytes are zeroed there before the launch (a dynamic tile scheduler's 32-bit counter; the
  /// flags and partial results of tiles that several blocks share).
  int work_buffer_arg = -1;
  std::size_t work_bytes = sizeof(unsigned);
  std::size_t work_zeroed_bytes = sizeof(unsigned);
  /// Programmatic dependent launch (sm_90 and newer): the kernel may be scheduled while the previous kernel on
  /// the stream finishes, and waits for that kernel's results itself (griddepcontrol.wait) before reading
  /// them, so the launch's latency hides behind the previous kernel's tail.
  bool overlaps_previous = false;
};

/// Kernel parameters by value (the driver copies them at launch), in a fixed buffer so a launch allocates
/// nothing. Room for a parameter struct and a few 128-byte TMA descriptors.
struct KernelArgs {
  static constexpr std::size_t kCapacityBytes = 1024;
  static constexpr int kMaxArgs = 8;
  alignas(128) unsigned char storage[kCapacityBytes];  // CUtensorMap (cuda.h) is 128-byte aligned
  void* pointers[kMaxArgs];
  std::size_t used_bytes = 0;
  int count = 0;

  /// Appends one kernel parameter; throws Error(kInternal) past the capacity (a family's bug).
  template <typename T>
  void push(const T& value) {
    const std::size_t offset = (used_bytes + alignof(T) - 1) / alignof(T) * alignof(T);
    if (offset + sizeof(T) > kCapacityBytes || count == kMaxArgs) overflow();
    unsigned char* slot = storage + offset;
    *reinterpret_cast<T*>(slot) = value;
    pointers[count++] = slot;
    used_bytes = offset + sizeof(T);
  }

 private:
  [[noreturn]] FLASHRTC_API static void overflow();
};

}  // namespace flashrtc

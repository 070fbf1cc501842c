#pragma once
/// The dimensions of one kernel launch: what a family's launch builder fills and the driver layer launches.
#include <cstddef>

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
};

}  // namespace flashrtc

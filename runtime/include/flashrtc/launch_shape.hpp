#pragma once
/// The dimensions of one kernel launch: what a family's launch builder fills and the driver layer launches.

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
  /// The index of a kernel parameter of type `unsigned*` that the runtime points at a 32-bit counter of its
  /// own, zeroed on the call's stream before the launch (a dynamic tile scheduler's), or -1 for none.
  int work_counter_arg = -1;
};

}  // namespace flashrtc

#include "launch.hpp"

#include <string>

#include "driver_api.hpp"
#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace {

std::string dims_text(const unsigned (&dims)[3]) {
  return std::to_string(dims[0]) + "x" + std::to_string(dims[1]) + "x" + std::to_string(dims[2]);
}

// Out of line and cold: the message is built only when a launch fails.
[[noreturn]] __attribute__((noinline, cold)) void throw_launch_failure(CUresult status,
                                                                       const LaunchDims& dims) {
  throw Error(ErrorCode::kDriver,
              "cuLaunchKernelEx failed for grid " + dims_text(dims.grid) + ", block " +
                  dims_text(dims.block) + ", cluster " + dims_text(dims.cluster) + ", " +
                  std::to_string(dims.dynamic_smem_bytes) + " bytes of dynamic shared memory",
              "cuLaunchKernelEx", driver_status_name(status));
}

}  // namespace

void launch_kernel(CUfunction f, const LaunchDims& dims, CUstream stream, void** args) {
  CUlaunchAttribute cluster;
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = dims.cluster[0];
  cluster.value.clusterDim.y = dims.cluster[1];
  cluster.value.clusterDim.z = dims.cluster[2];
  CUlaunchConfig config;
  config.gridDimX = dims.grid[0];
  config.gridDimY = dims.grid[1];
  config.gridDimZ = dims.grid[2];
  config.blockDimX = dims.block[0];
  config.blockDimY = dims.block[1];
  config.blockDimZ = dims.block[2];
  config.sharedMemBytes = dims.dynamic_smem_bytes;
  config.hStream = stream;
  config.attrs = &cluster;
  config.numAttrs = dims.cluster[0] != 1 || dims.cluster[1] != 1 || dims.cluster[2] != 1 ? 1 : 0;
  const CUresult status = driver().cuLaunchKernelEx(&config, f, args, nullptr);
  if (status != CUDA_SUCCESS) throw_launch_failure(status, dims);
}

}  // namespace flashrtc::detail

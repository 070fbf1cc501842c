#include "driver/launch.hpp"

#include <cstring>
#include <string>

#include "driver/driver_api.hpp"
#include "driver/stream_scratch.hpp"
#include "flashrtc/error.hpp"

namespace flashrtc {

void KernelArgs::overflow() {
  throw Error(ErrorCode::kInternal, "kernel parameters exceed KernelArgs' " + std::to_string(kCapacityBytes) +
                                        " bytes or " + std::to_string(kMaxArgs) + " arguments");
}

}  // namespace flashrtc

namespace flashrtc::detail {

namespace {

std::string dims_text(const unsigned (&dims)[3]) {
  return std::to_string(dims[0]) + "x" + std::to_string(dims[1]) + "x" + std::to_string(dims[2]);
}

// Out of line and cold: the message is built only when a launch fails.
[[noreturn]] __attribute__((noinline, cold)) void throw_launch_failure(CUresult status,
                                                                       const LaunchShape& shape) {
  throw Error(ErrorCode::kDriver,
              "cuLaunchKernelEx failed for grid " + dims_text(shape.grid) + ", block " +
                  dims_text(shape.block) + ", cluster " + dims_text(shape.cluster) + ", " +
                  std::to_string(shape.dynamic_smem_bytes) + " bytes of dynamic shared memory",
              "cuLaunchKernelEx", driver_status_name(status));
}

}  // namespace

void launch_kernel(CUfunction f, const LaunchShape& shape, CUstream stream, void** args) {
  CUlaunchAttribute attributes[2];
  unsigned count = 0;
  if (shape.cluster[0] != 1 || shape.cluster[1] != 1 || shape.cluster[2] != 1) {
    CUlaunchAttribute& cluster = attributes[count++];
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = shape.cluster[0];
    cluster.value.clusterDim.y = shape.cluster[1];
    cluster.value.clusterDim.z = shape.cluster[2];
  }
  if (shape.overlaps_previous) {
    CUlaunchAttribute& overlap = attributes[count++];
    overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    overlap.value.programmaticStreamSerializationAllowed = 1;
  }
  CUlaunchConfig config;
  config.gridDimX = shape.grid[0];
  config.gridDimY = shape.grid[1];
  config.gridDimZ = shape.grid[2];
  config.blockDimX = shape.block[0];
  config.blockDimY = shape.block[1];
  config.blockDimZ = shape.block[2];
  config.sharedMemBytes = shape.dynamic_smem_bytes;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  const CUresult status = driver().cuLaunchKernelEx(&config, f, args, nullptr);
  if (status != CUDA_SUCCESS) throw_launch_failure(status, shape);
}

void launch_family_kernel(CUfunction f, const LaunchShape& shape, CUstream stream, KernelArgs& args) {
  if (shape.work_buffer_arg < 0) return launch_kernel(f, shape, stream, args.pointers);
  if (shape.work_buffer_arg >= args.count)
    throw Error(ErrorCode::kInternal, "work_buffer_arg " + std::to_string(shape.work_buffer_arg) +
                                          " names no kernel parameter (the launch has " +
                                          std::to_string(args.count) + ")");
  if (shape.work_bytes == 0 || shape.work_zeroed_bytes > shape.work_bytes)
    throw Error(ErrorCode::kInternal, "work buffer of " + std::to_string(shape.work_bytes) + " bytes with " +
                                          std::to_string(shape.work_zeroed_bytes) + " zeroed");
  const Scratch buffer = Scratch::on_stream(shape.work_bytes, stream);
  if (shape.work_zeroed_bytes > 0) {
    const CUresult status = driver().cuMemsetD8Async(buffer.data(), 0, shape.work_zeroed_bytes, stream);
    if (status != CUDA_SUCCESS)
      throw Error(ErrorCode::kDriver, "cannot zero the launch's work buffer", "cuMemsetD8Async",
                  driver_status_name(status));
  }
  void* const pointer = reinterpret_cast<void*>(buffer.data());
  std::memcpy(args.pointers[shape.work_buffer_arg], &pointer, sizeof pointer);
  launch_kernel(f, shape, stream, args.pointers);
}

}  // namespace flashrtc::detail

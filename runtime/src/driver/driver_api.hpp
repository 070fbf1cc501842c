#pragma once
// The CUDA Driver API, loaded from libcuda.so.1 at run time: the library and the command work on machines
// without a GPU driver, and a missing driver is a typed error at the first call that needs one.
#include <cuda.h>

#include <cstdint>
#include <string>

namespace flashrtc::detail {

// Expands a cuda.h name to its versioned symbol (cuMemAlloc -> cuMemAlloc_v2; cuLaunchKernelEx ->
// cuLaunchKernelEx_ptsz under CUDA_API_PER_THREAD_DEFAULT_STREAM) before stringizing.
#define FLASHRTC_DRIVER_SYMBOL_STR(name) #name
#define FLASHRTC_DRIVER_SYMBOL(name) FLASHRTC_DRIVER_SYMBOL_STR(name)

// Every entry must resolve: the newest are cuTensorMapEncodeTiled (driver 12.0) and cuLaunchKernelEx (11.8).
// clang-format off
#define FLASHRTC_DRIVER_FUNCTIONS(X)                                                                    \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)             \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuCtxGetCurrent)      \
  X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuDevicePrimaryCtxRetain)                  \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute)                   \
  X(cuLaunchKernelEx) X(cuTensorMapEncodeTiled) X(cuMemAlloc) X(cuMemFree) X(cuMemPoolCreate)           \
  X(cuMemPoolSetAttribute) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync) X(cuMemcpyHtoD) X(cuMemcpyDtoH)  \
  X(cuMemsetD8) X(cuStreamCreate) X(cuStreamDestroy)                                                    \
  X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)      \
  X(cuEventElapsedTime) X(cuPointerGetAttribute) X(cuMemsetD8Async) X(cuMemsetD32Async)                \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphDestroy) \
  X(cuGraphExecDestroy)                                                                                  \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)
// clang-format on

struct DriverApi {
#define FLASHRTC_DECLARE_DRIVER_FN(name) decltype(&::name) name = nullptr;
  FLASHRTC_DRIVER_FUNCTIONS(FLASHRTC_DECLARE_DRIVER_FN)
#undef FLASHRTC_DECLARE_DRIVER_FN
};

// The loaded and initialized driver (cuInit done). Throws Error(kNoDevice) when libcuda cannot be loaded,
// cuInit fails or there is no device; the reason is remembered and thrown again on later calls.
const DriverApi& driver();
// Never throws: empty when driver() would succeed, else why not.
std::string driver_unavailable_reason();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
std::string driver_status_name(CUresult status);
// Throws Error(kDriver) naming the call and status unless status is CUDA_SUCCESS.
void check_driver(CUresult status, const char* call);
// For destructors, which must not throw: logs an error naming the call and status unless CUDA_SUCCESS.
void log_release_failure(CUresult status, const char* call) noexcept;

// Changes whenever a test installs or removes a driver table: memos of what a driver returned (encoded
// tensor maps, context descriptions) include it, so nothing one table produced is served under another.
std::uint64_t driver_generation();

struct LoadedDriver;  // driver_api.cpp

// For cpu tests only: while alive, driver() and everything above use a copy of fake (cuInit, the device
// count and the presence of every entry are checked as for libcuda.so.1, so a fake can fail them); on
// destruction the table that was in use before comes back. Not safe while other threads call the driver.
class ScopedDriverForTesting {
 public:
  explicit ScopedDriverForTesting(const DriverApi& fake);
  ~ScopedDriverForTesting();
  ScopedDriverForTesting(const ScopedDriverForTesting&) = delete;
  ScopedDriverForTesting& operator=(const ScopedDriverForTesting&) = delete;

 private:
  const LoadedDriver* previous_;
};

}  // namespace flashrtc::detail

// Calls a driver function through the loaded table and checks its result.
#define FLASHRTC_CU_CHECK(name, ...) \
  ::flashrtc::detail::check_driver(::flashrtc::detail::driver().name(__VA_ARGS__), #name)

#include "driver/context.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "driver/driver_api.hpp"

namespace flashrtc::detail {

namespace {

// In place: a ContextInfo holds a once_flag, which does not move.
void describe(ContextInfo& info, CUcontext context, CUdevice device) {
  info.context = context;
  info.device = device;
  char name[256] = {};
  FLASHRTC_CU_CHECK(cuDeviceGetName, name, static_cast<int>(sizeof(name)), device);
  info.name = name;
  FLASHRTC_CU_CHECK(cuDeviceGetAttribute, &info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  FLASHRTC_CU_CHECK(cuDeviceGetAttribute, &info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  FLASHRTC_CU_CHECK(cuDeviceGetAttribute, &info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  FLASHRTC_CU_CHECK(cuDeviceGetAttribute, &info.smem_per_block_optin_bytes,
                    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
}

}  // namespace

const ContextInfo& current_context() {
  CUcontext context = nullptr;
  FLASHRTC_CU_CHECK(cuCtxGetCurrent, &context);
  if (!context) {
    CUdevice device = 0;
    FLASHRTC_CU_CHECK(cuDeviceGet, &device, 0);
    // Retained for the life of the process, like the CUDA runtime's own reference: releasing it at exit
    // could run after the driver has been torn down.
    FLASHRTC_CU_CHECK(cuDevicePrimaryCtxRetain, &context, device);
    FLASHRTC_CU_CHECK(cuCtxSetCurrent, context);
  }
  // Described once per context; the cache is process-wide because contexts live until process exit here.
  // The driver generation keeps a test's fake context from being answered with another table's description
  // (or scratch pool).
  static std::mutex mutex;
  static std::map<std::pair<std::uint64_t, CUcontext>, std::unique_ptr<ContextInfo>> known;
  const std::pair<std::uint64_t, CUcontext> key{driver_generation(), context};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(key);
  if (it == known.end()) {
    CUdevice device = 0;
    FLASHRTC_CU_CHECK(cuCtxGetDevice, &device);
    auto info = std::make_unique<ContextInfo>();
    describe(*info, context, device);
    it = known.emplace(key, std::move(info)).first;
  }
  return *it->second;
}

std::string arch_for(int cc_major, int cc_minor) {
  std::string arch = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if (cc_major == 9 && cc_minor == 0) arch += "a";
  return arch;
}

}  // namespace flashrtc::detail

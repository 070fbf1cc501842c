#include "driver_api.hpp"

#include <dlfcn.h>

#include <mutex>

#include "flashrtc/error.hpp"
#include "log.hpp"

namespace flashrtc::detail {

namespace {

struct LoadedDriver {
  DriverApi api;
  std::string failure;  // empty when usable
};

LoadedDriver load_driver() {
  LoadedDriver loaded;
  // Never dlclose'd: the driver stays for the life of the process, as the CUDA runtime's does.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    loaded.failure = std::string("cannot load the CUDA driver library libcuda.so.1 (") + (why ? why : "?") +
                     "): no NVIDIA driver on this machine";
    return loaded;
  }
#define FLASHRTC_LOAD_DRIVER_FN(name)                                                              \
  loaded.api.name = reinterpret_cast<decltype(loaded.api.name)>(dlsym(handle, FLASHRTC_DRIVER_SYMBOL(name))); \
  if (!loaded.api.name && loaded.failure.empty())                                                  \
    loaded.failure = std::string("libcuda.so.1 lacks ") + FLASHRTC_DRIVER_SYMBOL(name) + ": driver too old";
  FLASHRTC_DRIVER_FUNCTIONS(FLASHRTC_LOAD_DRIVER_FN)
#undef FLASHRTC_LOAD_DRIVER_FN
  if (!loaded.failure.empty()) return loaded;

  const CUresult init = loaded.api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    loaded.api.cuGetErrorName(init, &name);
    loaded.failure = std::string("cuInit failed: ") + (name ? name : "unknown error") + " (no usable GPU)";
    return loaded;
  }
  int count = 0;
  if (loaded.api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
    loaded.failure = "the CUDA driver reports no device";
  return loaded;
}

const LoadedDriver& loaded_driver() {
  static const LoadedDriver loaded = load_driver();
  return loaded;
}

}  // namespace

const DriverApi& driver() {
  const LoadedDriver& loaded = loaded_driver();
  if (!loaded.failure.empty()) throw Error(ErrorCode::kNoDevice, loaded.failure, "cuInit");
  return loaded.api;
}

std::string driver_unavailable_reason() { return loaded_driver().failure; }

std::string driver_status_name(CUresult status) {
  const LoadedDriver& loaded = loaded_driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (loaded.api.cuGetErrorName) loaded.api.cuGetErrorName(status, &name);
  if (loaded.api.cuGetErrorString) loaded.api.cuGetErrorString(status, &text);
  std::string result = name ? name : "CUresult " + std::to_string(static_cast<int>(status));
  if (text) result += std::string(" (") + text + ")";
  return result;
}

void check_driver(CUresult status, const char* call) {
  if (status == CUDA_SUCCESS) return;
  throw Error(ErrorCode::kDriver, std::string(call) + " failed", call, driver_status_name(status));
}

}  // namespace flashrtc::detail

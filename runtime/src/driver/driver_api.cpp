#include "driver/driver_api.hpp"

#include <dlfcn.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "flashrtc/error.hpp"
#include "support/log.hpp"

namespace flashrtc::detail {

struct LoadedDriver {
  DriverApi api;
  std::string failure;  // empty when usable
};

namespace {

// What libcuda.so.1 and a test's table both go through: every entry present, cuInit, at least one device.
LoadedDriver initialize(const DriverApi& api, const std::string& origin) {
  LoadedDriver loaded;
  loaded.api = api;
#define FLASHRTC_CHECK_DRIVER_FN(name)            \
  if (!loaded.api.name && loaded.failure.empty()) \
    loaded.failure = origin + " lacks " + FLASHRTC_DRIVER_SYMBOL(name) + ": driver too old";
  FLASHRTC_DRIVER_FUNCTIONS(FLASHRTC_CHECK_DRIVER_FN)
#undef FLASHRTC_CHECK_DRIVER_FN
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

LoadedDriver load_driver() {
  // Never dlclose'd: the driver stays for the life of the process, as the CUDA runtime's does.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    LoadedDriver loaded;
    loaded.failure = std::string("cannot load the CUDA driver library libcuda.so.1 (") + (why ? why : "?") +
                     "): no NVIDIA driver on this machine";
    return loaded;
  }
  DriverApi api;
#define FLASHRTC_LOAD_DRIVER_FN(name) \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, FLASHRTC_DRIVER_SYMBOL(name)));
  FLASHRTC_DRIVER_FUNCTIONS(FLASHRTC_LOAD_DRIVER_FN)
#undef FLASHRTC_LOAD_DRIVER_FN
  return initialize(api, "libcuda.so.1");
}

const LoadedDriver& loaded_driver() {
  static const LoadedDriver loaded = load_driver();
  return loaded;
}

std::atomic<const LoadedDriver*> g_testing_driver{nullptr};
std::atomic<std::uint64_t> g_generation{0};

// One atomic load on the per-call path; libcuda.so.1 is loaded only when no test table is installed.
const LoadedDriver& active_driver() {
  if (const LoadedDriver* testing = g_testing_driver.load(std::memory_order_acquire)) return *testing;
  return loaded_driver();
}

}  // namespace

const DriverApi& driver() {
  const LoadedDriver& loaded = active_driver();
  if (!loaded.failure.empty()) throw Error(ErrorCode::kNoDevice, loaded.failure, "cuInit");
  return loaded.api;
}

std::string driver_unavailable_reason() {
  return active_driver().failure;
}

std::string driver_status_name(CUresult status) {
  const LoadedDriver& loaded = active_driver();
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

void log_release_failure(CUresult status, const char* call) noexcept {
  if (status == CUDA_SUCCESS) return;
  try {
    log().error("{} failed in a destructor: {}", call, driver_status_name(status));
  } catch (...) {
    // Nothing left to report with: the failure is dropped rather than thrown out of a destructor.
  }
}

std::uint64_t driver_generation() {
  return g_generation.load(std::memory_order_acquire);
}

// The installed copy is never freed (a few hundred bytes per test): a reference a caller took from driver()
// stays valid after the guard is gone. Kept in a list that lives as long as the process, so that a leak
// checker sees it as reachable.
namespace {
const LoadedDriver* retain_for_process(LoadedDriver driver) {
  static std::mutex mutex;
  static auto* retained = new std::vector<std::unique_ptr<const LoadedDriver>>;  // never destroyed, as above
  std::lock_guard<std::mutex> lock(mutex);
  retained->push_back(std::make_unique<const LoadedDriver>(std::move(driver)));
  return retained->back().get();
}
}  // namespace

ScopedDriverForTesting::ScopedDriverForTesting(const DriverApi& fake)
    : previous_(g_testing_driver.exchange(retain_for_process(initialize(fake, "the test's driver table")))) {
  ++g_generation;
}

ScopedDriverForTesting::~ScopedDriverForTesting() {
  g_testing_driver.store(previous_, std::memory_order_release);
  ++g_generation;
}

}  // namespace flashrtc::detail

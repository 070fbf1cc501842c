#include "driver/loaded_kernels.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "driver/driver_api.hpp"
#include "flashrtc/error.hpp"

namespace flashrtc::detail {

CUfunction load_kernel_function(CUcontext context, const std::string& key, const std::string& cubin,
                                const std::string& lowered_name, int dynamic_smem_bytes) {
  struct Loaded {
    std::mutex mutex;
    // Keyed by the driver table's generation too: a test's fake driver may hand out a context handle that
    // an earlier table used.
    std::map<std::tuple<std::uint64_t, CUcontext, std::string>, CUfunction> functions;
  };
  static Loaded* loaded = new Loaded;  // leaked: modules must not be unloaded after driver teardown
  const auto loaded_key = std::make_tuple(driver_generation(), context, key);
  std::lock_guard<std::mutex> lock(loaded->mutex);
  auto it = loaded->functions.find(loaded_key);
  if (it != loaded->functions.end()) return it->second;
  const DriverApi& api = driver();
  CUmodule module = nullptr;
  FLASHRTC_CU_CHECK(cuModuleLoadData, &module, cubin.data());
  CUfunction function = nullptr;
  try {
    FLASHRTC_CU_CHECK(cuModuleGetFunction, &function, module, lowered_name.c_str());
    FLASHRTC_CU_CHECK(cuFuncSetAttribute, function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                      dynamic_smem_bytes);
  } catch (...) {
    api.cuModuleUnload(module);
    throw;
  }
  return loaded->functions.emplace(loaded_key, function).first->second;
}

}  // namespace flashrtc::detail

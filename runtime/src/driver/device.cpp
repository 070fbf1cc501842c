#include "flashrtc/device.hpp"

#include "driver/context.hpp"
#include "driver/driver_api.hpp"

namespace flashrtc {

bool device_available() { return detail::driver_unavailable_reason().empty(); }

std::string device_unavailable_reason() { return detail::driver_unavailable_reason(); }

DeviceInfo current_device() {
  const detail::ContextInfo& context = detail::current_context();
  DeviceInfo info;
  FLASHRTC_CU_CHECK(cuDriverGetVersion, &info.driver_version);
  char name[256] = {};
  FLASHRTC_CU_CHECK(cuDeviceGetName, name, static_cast<int>(sizeof(name)), context.device);
  info.name = name;
  info.ordinal = static_cast<int>(context.device);
  info.cc_major = context.cc_major;
  info.cc_minor = context.cc_minor;
  info.arch = detail::arch_for(context.cc_major, context.cc_minor);
  info.multiprocessors = context.multiprocessors;
  info.smem_per_block_optin_bytes = static_cast<std::size_t>(context.smem_per_block_optin_bytes);
  size_t total = 0;
  FLASHRTC_CU_CHECK(cuDeviceTotalMem, &total, context.device);
  info.global_memory_bytes = total;
  const auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    FLASHRTC_CU_CHECK(cuDeviceGetAttribute, &value, which, context.device);
    return value;
  };
  info.l2_cache_bytes = static_cast<std::size_t>(attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
  info.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  info.max_threads_per_sm = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  info.max_blocks_per_sm = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  info.registers_per_sm = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  info.smem_per_sm_bytes = static_cast<std::size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  info.reserved_smem_per_block_bytes =
      static_cast<std::size_t>(attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK));
  return info;
}

}  // namespace flashrtc

// `flashrtc info`: what this machine offers flashrtc. Works without a GPU, saying why there is none.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "cli_support.hpp"
#include "flashrtc/c_api.h"

extern char** environ;

namespace flashrtc::cli {

namespace {

// Every variable the runtime reads (config.hpp); listed even when unset so a user sees what exists.
constexpr const char* kKnownVariables[] = {
    "FLASHRTC_CACHE_DIR",      "FLASHRTC_DISABLE_DISK_CACHE", "FLASHRTC_ALWAYS_COMPILE",
    "FLASHRTC_REQUIRE_CACHED", "FLASHRTC_DUMP_SOURCES",       "FLASHRTC_KERNEL_DIR",
    "FLASHRTC_ARCH",           "FLASHRTC_LOG_LEVEL",          "FLASHRTC_CONFIG",
    "FLASHRTC_TUNE_DB",
};

void print_environment() {
  std::printf("environment:\n");
  std::set<std::string> names(std::begin(kKnownVariables), std::end(kKnownVariables));
  for (char** entry = environ; entry && *entry; ++entry)
    if (std::strncmp(*entry, "FLASHRTC_", 9) == 0)
      names.insert(std::string(*entry, std::strcspn(*entry, "=")));
  for (const std::string& name : names) {
    const char* value = std::getenv(name.c_str());
    std::printf("  %-28s %s\n", name.c_str(), value ? value : "(unset)");
  }
}

// Returns whether a usable GPU was found.
bool print_device() {
  if (!device_available()) {
    std::printf("gpu:       none (%s)\n", device_unavailable_reason().c_str());
    return false;
  }
  try {
    const DeviceInfo device = current_device();
    std::printf("driver:    %d.%d\n", device.driver_version / 1000, device.driver_version % 1000 / 10);
    std::printf(
        "gpu:       %d: %s, compute capability %d.%d, arch %s, %d SMs, %s memory, %s shared memory per "
        "block\n",
        device.ordinal, device.name.c_str(), device.cc_major, device.cc_minor, device.arch.c_str(),
        device.multiprocessors, format_bytes(static_cast<double>(device.global_memory_bytes)).c_str(),
        format_bytes(static_cast<double>(device.smem_per_block_optin_bytes)).c_str());
    if (device.cc_major < 8)
      std::printf("           (flashrtc kernels need compute capability 8.0 or newer)\n");
    return device.cc_major >= 8;
  } catch (const Error& e) {
    std::printf("gpu:       unusable (%s)\n", e.what());
    return false;
  }
}

int execute_info(bool has_gpu_only) {
  if (has_gpu_only) {
    const bool usable = print_device();
    return usable ? kExitOk : kExitDevice;
  }
  std::printf("flashrtc:  %s\n", flashrtc_version());
  std::printf("nvrtc:     %s\n", nvrtc_version().c_str());
  print_device();
  std::printf("cache:     %s (%zu entries)\n", cache_root().string().c_str(), cache_entry_count());
  std::printf("tuning:    %s (%zu entries)\n", tuning_db_path().string().c_str(), tuning_db_entries().size());
  print_environment();
  return kExitOk;
}

}  // namespace

Command add_info_command(CLI::App& parent) {
  CLI::App* app =
      parent.add_subcommand("info", "flashrtc and NVRTC versions, driver and GPU, cache, settings");
  auto has_gpu_only = std::make_shared<bool>(false);
  app->add_flag("--has-gpu", *has_gpu_only,
                "print only the GPU line; exit 0 if a usable GPU is present, else 3");
  return {app, [has_gpu_only] { return execute_info(*has_gpu_only); }};
}

}  // namespace flashrtc::cli

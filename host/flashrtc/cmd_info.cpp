// `flashrtc info`: what this machine offers flashrtc. Works without a GPU, saying why there is none.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "cli_support.hpp"
#include "flashrtc/c_api.h"
#include "json_output.hpp"

extern char** environ;

namespace flashrtc::cli {

namespace {

// The known variables and every other FLASHRTC_ one set, sorted.
std::set<std::string> environment_names() {
  std::set<std::string> names(std::begin(kEnvironmentVariables), std::end(kEnvironmentVariables));
  for (char** entry = environ; entry && *entry; ++entry)
    if (std::strncmp(*entry, "FLASHRTC_", 9) == 0)
      names.insert(std::string(*entry, std::strcspn(*entry, "=")));
  return names;
}

void print_environment() {
  std::printf("environment:\n");
  for (const std::string& name : environment_names()) {
    const char* value = std::getenv(name.c_str());
    std::printf("  %-28s %s\n", name.c_str(), value ? value : "(unset)");
  }
}

// The GPU as flashrtc sees it: the device when there is one, else why not.
struct GpuState {
  std::optional<DeviceInfo> device;
  std::string problem;    // why there is none, or why it is unusable; empty when usable
  bool unusable = false;  // a device that failed to answer
};

GpuState gpu_state() {
  GpuState state;
  if (!device_available()) {
    state.problem = device_unavailable_reason();
    return state;
  }
  try {
    state.device = current_device();
    if (state.device->cc_major < 8) state.problem = "flashrtc kernels need compute capability 8.0 or newer";
  } catch (const Error& e) {
    state.problem = e.what();
    state.unusable = true;
  }
  return state;
}

// {"usable", "device" (null without one), "problem" (null when usable)}.
Json gpu_json(const GpuState& gpu) {
  return Json{{"usable", gpu.problem.empty()},
              {"device", gpu.device ? Json(*gpu.device) : Json(nullptr)},
              {"problem", gpu.problem.empty() ? Json(nullptr) : Json(gpu.problem)}};
}

// Returns whether a usable GPU was found.
bool print_device(const GpuState& gpu) {
  if (!gpu.device) {
    std::printf("gpu:       %s (%s)\n", gpu.unusable ? "unusable" : "none", gpu.problem.c_str());
    return false;
  }
  const DeviceInfo& device = *gpu.device;
  std::printf("driver:    %d.%d\n", device.driver_version / 1000, device.driver_version % 1000 / 10);
  std::printf(
      "gpu:       %d: %s, compute capability %d.%d, arch %s, %d SMs, %s memory, %s shared memory per "
      "block\n",
      device.ordinal, device.name.c_str(), device.cc_major, device.cc_minor, device.arch.c_str(),
      device.multiprocessors, format_bytes(static_cast<double>(device.global_memory_bytes)).c_str(),
      format_bytes(static_cast<double>(device.smem_per_block_optin_bytes)).c_str());
  if (!gpu.problem.empty()) std::printf("           (%s)\n", gpu.problem.c_str());
  return gpu.problem.empty();
}

int execute_info_json(bool has_gpu_only) {
  const GpuState gpu = gpu_state();
  if (has_gpu_only) {
    print_json_document(Json{{"gpu", gpu_json(gpu)}});
    return gpu.problem.empty() ? kExitOk : kExitDevice;
  }
  Json environment = Json::object();
  for (const std::string& name : environment_names()) {
    const char* value = std::getenv(name.c_str());
    environment[name] = value ? Json(value) : Json(nullptr);
  }
  print_json_document(
      Json{{"flashrtc", flashrtc_version()},
           {"nvrtc", nvrtc_version()},
           {"gpu", gpu_json(gpu)},
           {"cache", {{"dir", cache_root().string()}, {"entries", cache_entry_count()}}},
           {"tuning_db", {{"path", tuning_db_path().string()}, {"entries", tuning_db_entries().size()}}},
           {"environment", environment}});
  return kExitOk;
}

int execute_info(bool has_gpu_only, bool json) {
  if (json) return execute_info_json(has_gpu_only);
  if (has_gpu_only) {
    const bool usable = print_device(gpu_state());
    return usable ? kExitOk : kExitDevice;
  }
  std::printf("flashrtc:  %s\n", flashrtc_version());
  std::printf("nvrtc:     %s\n", nvrtc_version().c_str());
  print_device(gpu_state());
  std::printf("cache:     %s (%zu entries)\n", cache_root().string().c_str(), cache_entry_count());
  std::printf("tuning:    %s (%zu entries)\n", tuning_db_path().string().c_str(), tuning_db_entries().size());
  print_environment();
  return kExitOk;
}

}  // namespace

Command add_info_command(CLI::App& parent) {
  CLI::App* app =
      parent.add_subcommand("info", "flashrtc and NVRTC versions, driver and GPU, cache, settings");
  auto has_gpu_only = std::make_shared<bool>(false), json = std::make_shared<bool>(false);
  app->add_flag("--has-gpu", *has_gpu_only,
                "print only the GPU line; exit 0 if a usable GPU is present, else 3");
  app->add_flag("--json", *json,
                "one JSON document: flashrtc, nvrtc, gpu {usable, device, problem}, cache {dir, entries}, "
                "tuning_db {path, entries}, environment (with --has-gpu: gpu alone)");
  return {app, [has_gpu_only, json] { return execute_info(*has_gpu_only, *json); }};
}

}  // namespace flashrtc::cli

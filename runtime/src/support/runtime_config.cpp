#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "flashrtc/config.hpp"
#include "support/log.hpp"
#include "support/settings_generation.hpp"

namespace flashrtc {

namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

bool env_flag(const char* name, bool fallback) {
  const char* value = env(name);
  if (!value) return fallback;
  const std::string_view v(value);
  return !(v == "0" || v == "false" || v == "no" || v == "off");
}

std::filesystem::path default_cache_dir() {
  if (const char* dir = env("FLASHRTC_CACHE_DIR")) return dir;
  if (const char* xdg = env("XDG_CACHE_HOME")) return std::filesystem::path(xdg) / "flashrtc";
  if (const char* home = env("HOME")) return std::filesystem::path(home) / ".cache" / "flashrtc";
  return std::filesystem::temp_directory_path() / "flashrtc-cache";
}

std::mutex& config_mutex() {
  static std::mutex mutex;
  return mutex;
}

RuntimeConfig& config_storage() {
  static RuntimeConfig config = RuntimeConfig::from_environment();
  return config;
}

std::atomic<std::uint64_t> g_generation{0};

}  // namespace

namespace detail {

std::uint64_t settings_generation() { return g_generation.load(std::memory_order_acquire); }
void bump_settings_generation() { g_generation.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace detail

const char* version() { return FLASHRTC_VERSION_STRING; }

RuntimeConfig RuntimeConfig::from_environment() {
  RuntimeConfig config;
  config.cache_dir = default_cache_dir();
  config.disk_cache = !env_flag("FLASHRTC_DISABLE_DISK_CACHE", false);
  config.always_compile = env_flag("FLASHRTC_ALWAYS_COMPILE", false);
  config.require_cached = env_flag("FLASHRTC_REQUIRE_CACHED", false);
  if (const char* dir = env("FLASHRTC_DUMP_SOURCES")) config.dump_sources_dir = dir;
  if (const char* dir = env("FLASHRTC_KERNEL_DIR")) config.kernel_dir = dir;
  if (const char* arch = env("FLASHRTC_ARCH")) config.arch_override = arch;
  if (const char* text = env("FLASHRTC_CONFIG")) config.config_override = text;
  if (const char* path = env("FLASHRTC_TUNE_DB")) config.tune_db = path;
  if (const char* level = env("FLASHRTC_LOG_LEVEL")) config.log_level = level;
  return config;
}

const RuntimeConfig& runtime_config() {
  std::lock_guard<std::mutex> lock(config_mutex());
  return config_storage();
}

void set_runtime_config(const RuntimeConfig& config) {
  {
    std::lock_guard<std::mutex> lock(config_mutex());
    config_storage() = config;
  }
  detail::bump_settings_generation();
  detail::set_log_level(config.log_level);
}

}  // namespace flashrtc

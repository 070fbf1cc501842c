#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>

#include "flashrtc/config.hpp"
#include "flashrtc/error.hpp"
#include "support/json_checked.hpp"
#include "support/log.hpp"
#include "support/settings_generation.hpp"

namespace flashrtc {

namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

std::string lowercase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

// The value as the error shows it: an environment value may be anything, of any length.
std::string shown(std::string_view value) {
  return "'" + detail::printable_ascii(value.substr(0, 40)) + (value.size() > 40 ? "...'" : "'");
}

bool env_flag(const char* name, bool fallback) {
  const char* value = env(name);
  return value ? parse_env_flag(name, value) : fallback;
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

// Empty until first read: a refused environment is thrown again at each read, and set_runtime_config can
// still replace it.
std::optional<RuntimeConfig>& config_storage() {
  static std::optional<RuntimeConfig> config;
  return config;
}

std::atomic<std::uint64_t> g_generation{0};

}  // namespace

bool parse_env_flag(std::string_view name, std::string_view value) {
  const std::string v = lowercase(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw Error(ErrorCode::kInvalidArgument, std::string(name) + "=" + shown(value) + ": must be one of " +
                                               kEnvFlagValues + " (any case; empty or unset: off)");
}

std::string parse_log_level(std::string_view name, std::string_view value) {
  std::string level = lowercase(value);
  for (const char* known : {"trace", "debug", "info", "warn", "error", "critical", "off"})
    if (level == known) return level;
  throw Error(ErrorCode::kInvalidArgument,
              std::string(name) + "=" + shown(value) + ": must be one of " + kLogLevels + " (any case)");
}

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
  if (const char* level = env("FLASHRTC_LOG_LEVEL"))
    config.log_level = parse_log_level("FLASHRTC_LOG_LEVEL", level);
  return config;
}

const RuntimeConfig& runtime_config() {
  std::lock_guard<std::mutex> lock(config_mutex());
  std::optional<RuntimeConfig>& config = config_storage();
  if (!config) config = RuntimeConfig::from_environment();
  return *config;
}

void set_runtime_config(const RuntimeConfig& config) {
  RuntimeConfig checked = config;
  checked.log_level = parse_log_level("RuntimeConfig::log_level", config.log_level);
  {
    std::lock_guard<std::mutex> lock(config_mutex());
    config_storage() = checked;
  }
  detail::bump_settings_generation();
  detail::set_log_level(checked.log_level);
}

}  // namespace flashrtc

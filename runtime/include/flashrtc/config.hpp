#pragma once
/// Run-time settings: read once from the environment, overridable in code. docs/cpp.md's table lists every
/// variable and the values it accepts.
#include <filesystem>
#include <string>
#include <string_view>

#include "flashrtc/export.hpp"

namespace flashrtc {

struct FLASHRTC_API RuntimeConfig {
  /// FLASHRTC_CACHE_DIR, else $XDG_CACHE_HOME/flashrtc, else ~/.cache/flashrtc.
  std::filesystem::path cache_dir;
  /// The three flags below take parse_env_flag's values.
  /// FLASHRTC_DISABLE_DISK_CACHE=1 keeps compiled kernels in memory only.
  bool disk_cache = true;
  /// FLASHRTC_ALWAYS_COMPILE=1 ignores cached entries (and overwrites them).
  bool always_compile = false;
  /// FLASHRTC_REQUIRE_CACHED=1: a call that would compile throws kCompileDisallowed (for warmed deployments).
  bool require_cached = false;
  /// FLASHRTC_DUMP_SOURCES=DIR writes each compiled program's sources and options there.
  std::filesystem::path dump_sources_dir;
  /// FLASHRTC_KERNEL_DIR=DIR reads kernel sources from DIR instead of the embedded copy.
  std::filesystem::path kernel_dir;
  /// FLASHRTC_ARCH=sm_XX overrides the arch that kernels are compiled for (default: the device's).
  std::string arch_override;
  /// FLASHRTC_CONFIG="block_m=64,block_n=64,warps=4,stages=2": tile fields that override the tuned or
  /// default tile of every call without an explicit config (only the fields given). Checked at each call.
  std::string config_override;
  /// FLASHRTC_TUNE_DB=FILE: the tuning database; empty means cache_dir / "tuning_db.json".
  std::filesystem::path tune_db;
  /// FLASHRTC_LOG_LEVEL: trace, debug, info, warn (default), error, critical, off (parse_log_level).
  std::string log_level = "warn";

  /// Reads the variables above; unset or empty ones keep their defaults. Throws Error(kInvalidArgument)
  /// naming the variable and the accepted values for a flag or log level it does not know (never guesses).
  static RuntimeConfig from_environment();
};

/// Every variable the runtime reads (`flashrtc info` lists them, set or not).
inline constexpr const char* kEnvironmentVariables[] = {
    "FLASHRTC_CACHE_DIR",      "FLASHRTC_DISABLE_DISK_CACHE",
    "FLASHRTC_ALWAYS_COMPILE", "FLASHRTC_REQUIRE_CACHED",
    "FLASHRTC_DUMP_SOURCES",   "FLASHRTC_KERNEL_DIR",
    "FLASHRTC_ARCH",           "FLASHRTC_CONFIG",
    "FLASHRTC_TUNE_DB",        "FLASHRTC_LOG_LEVEL"};

/// What a flag variable accepts, in any case: on is 1, true, yes, on; off is 0, false, no, off.
inline constexpr const char* kEnvFlagValues = "1, true, yes, on, 0, false, no, off";
/// The value of a flag variable named name; anything else throws Error(kInvalidArgument) naming name,
/// the value and kEnvFlagValues.
FLASHRTC_API bool parse_env_flag(std::string_view name, std::string_view value);

/// The log levels, in any case.
inline constexpr const char* kLogLevels = "trace, debug, info, warn, error, critical, off";
/// value as a log level in lower case; anything else throws Error(kInvalidArgument) naming name, the value
/// and kLogLevels.
FLASHRTC_API std::string parse_log_level(std::string_view name, std::string_view value);

/// "0.1.0".
FLASHRTC_API const char* version();

/// The process-wide settings (from the environment on first use; a value from_environment refuses is thrown
/// again by every call until set_runtime_config replaces the settings).
FLASHRTC_API const RuntimeConfig& runtime_config();
/// Replaces the process-wide settings for later calls and applies the log level. Call it while no other
/// thread is inside flashrtc: calls in flight read the settings without a lock. An unknown log_level throws
/// Error(kInvalidArgument) and changes nothing.
FLASHRTC_API void set_runtime_config(const RuntimeConfig& config);

}  // namespace flashrtc

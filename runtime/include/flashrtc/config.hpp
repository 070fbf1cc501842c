#pragma once
/// Run-time settings: read once from the environment, overridable in code.
#include <filesystem>
#include <string>

#include "flashrtc/export.hpp"

namespace flashrtc {

struct FLASHRTC_API RuntimeConfig {
  /// FLASHRTC_CACHE_DIR, else $XDG_CACHE_HOME/flashrtc, else ~/.cache/flashrtc.
  std::filesystem::path cache_dir;
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
  /// FLASHRTC_LOG_LEVEL: trace, debug, info, warn (default), error, critical, off.
  std::string log_level = "warn";

  /// Reads the variables above; unset ones keep their defaults.
  static RuntimeConfig from_environment();
};

/// "0.1.0".
FLASHRTC_API const char* version();

/// The process-wide settings (from the environment on first use).
FLASHRTC_API const RuntimeConfig& runtime_config();
/// Replaces the process-wide settings for later calls and applies the log level. Call it while no other
/// thread is inside flashrtc: calls in flight read the settings without a lock.
FLASHRTC_API void set_runtime_config(const RuntimeConfig& config);

}  // namespace flashrtc

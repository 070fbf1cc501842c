#pragma once
// Shared by the tests/cpu/test_runtime_*.cpp suites: fresh temporary cache directories and a scoped
// override of the process-wide RuntimeConfig.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "flashrtc/config.hpp"
#include "flashrtc/error.hpp"

namespace flashrtc::test {

/// A new, empty directory under the system temp dir; removed (recursively) on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "flashrtc-test") {
    static std::atomic<int> counter{0};
    std::random_device rd;
    std::ostringstream name;
    name << tag << "-" << ::getpid() << "-" << counter++ << "-" << std::hex << rd();
    path_ = std::filesystem::temp_directory_path() / name.str();
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// Installs a modified copy of the current RuntimeConfig; restores the previous one on destruction.
class ConfigOverride {
 public:
  ConfigOverride() : saved_(runtime_config()) {}
  explicit ConfigOverride(const RuntimeConfig& config) : saved_(runtime_config()) {
    set_runtime_config(config);
  }
  ~ConfigOverride() { set_runtime_config(saved_); }
  ConfigOverride(const ConfigOverride&) = delete;
  ConfigOverride& operator=(const ConfigOverride&) = delete;
  const RuntimeConfig& saved() const { return saved_; }

 private:
  RuntimeConfig saved_;
};

/// The current config with the disk cache at dir (on) and the switches that change cache behaviour off.
inline RuntimeConfig config_with_cache_dir(const std::filesystem::path& dir) {
  RuntimeConfig config = runtime_config();
  config.cache_dir = dir;
  config.disk_cache = true;
  config.always_compile = false;
  config.require_cached = false;
  config.dump_sources_dir.clear();
  return config;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// Runs f, which must throw flashrtc::Error; returns it (fails the test when f returns or throws another
/// type).
template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected flashrtc::Error, got std::exception: " << e.what());
  }
  FAIL("expected flashrtc::Error, nothing was thrown");
  return Error(ErrorCode::kInternal, "unreachable");
}

}  // namespace flashrtc::test

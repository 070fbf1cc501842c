#pragma once
// Shared by the tuning suites: a private tuning database and cache per test, and entries to put in it.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/tuning_db.hpp"
#include "tuning/tuning_db_file.hpp"

namespace flashrtc::test {

/// A fresh cache directory and tuning database path, installed for the test's duration; the process's
/// copies of databases are dropped on entry and exit so each test reads its own file.
class TuningSandbox {
 public:
  explicit TuningSandbox(const std::string& tag, const std::string& config_override = "")
      : dir_(tag), config_(make_config(dir_.path(), config_override)) {
    detail::forget_loaded_tuning_dbs();
  }
  ~TuningSandbox() { detail::forget_loaded_tuning_dbs(); }
  const std::filesystem::path& dir() const { return dir_.path(); }
  std::filesystem::path db() const { return dir_.path() / "tune" / "db.json"; }

 private:
  static RuntimeConfig make_config(const std::filesystem::path& dir, const std::string& config_override) {
    RuntimeConfig config = config_with_cache_dir(dir / "cache");
    config.tune_db = dir / "tune" / "db.json";
    config.config_override = config_override;
    config.arch_override.clear();
    return config;
  }
  TempDir dir_;
  ConfigOverride config_;
};

/// "warps=8" when to differs from from in exactly one field; empty otherwise.
inline std::string single_field_override(const TileConfig& from, const TileConfig& to) {
  std::string text;
  int differing = 0;
  const auto field = [&](const char* name, int a, int b) {
    if (a != b) {
      ++differing;
      text = std::string(name) + "=" + std::to_string(b);
    }
  };
  field("block_m", from.block_m, to.block_m);
  field("block_n", from.block_n, to.block_n);
  field("warps", from.warps, to.warps);
  field("stages", from.stages, to.stages);
  return differing == 1 ? text : std::string();
}

/// A configuration of space that differs from base in exactly one field (so an override of that one field
/// turns base into it), whatever the kernel family's space looks like.
inline std::optional<TileConfig> one_field_variant(const std::vector<TileConfig>& space, const TileConfig& base) {
  for (const TileConfig& c : space)
    if (!single_field_override(base, c).empty()) return c;
  return std::nullopt;
}

inline TuningEntry make_entry(const TuningKey& key, const TileConfig& config, double tflops = 10.0) {
  TuningEntry e;
  e.key = key;
  e.config = config;
  e.median_ms = 1.5;
  e.tflops = tflops;
  e.batch = 2;
  e.heads = 16;
  e.seqlen_q = key.seqlen_q_bucket;
  e.seqlen_kv = key.seqlen_kv_bucket;
  e.space = "quick";
  e.tuned_unix = 1700000000;
  return e;
}

}  // namespace flashrtc::test

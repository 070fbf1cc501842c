// FLASHRTC_CONFIG's syntax: parse_tile_override accepts any subset of the four fields and names the field
// (and its source) in every error.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"

using namespace flashrtc;

TEST_CASE("tile override: every field, any subset, any order, spaces around items") {
  const TileOverride all = parse_tile_override("block_m=64,block_n=32,warps=8,stages=2");
  CHECK(all.block_m == 64);
  CHECK(all.block_n == 32);
  CHECK(all.warps == 8);
  CHECK(all.stages == 2);
  CHECK(all.apply({1, 1, 1, 1}) == TileConfig{64, 32, 8, 2});

  const TileOverride some = parse_tile_override(" warps = 4 , block_m=128 ");
  CHECK(some.block_m == 128);
  CHECK_FALSE(some.block_n.has_value());
  CHECK(some.warps == 4);
  CHECK_FALSE(some.stages.has_value());
  // Only the fields given replace the base's.
  CHECK(some.apply({16, 16, 2, 2}) == TileConfig{128, 16, 4, 2});

  CHECK(parse_tile_override("").empty());
  CHECK(parse_tile_override("   ").empty());
  // Values are taken as given; whether the kernel supports them is config resolution's check.
  CHECK(parse_tile_override("block_n=-16").block_n == -16);
}

TEST_CASE("tile override: each malformed text throws kInvalidArgument naming the source and the field") {
  const struct {
    const char* text;
    const char* names;
  } cases[] = {
      {"blockm=64", "unknown field 'blockm'"},
      {"block_m=64,threads=128", "unknown field 'threads'"},
      {"block_m=abc", "block_m='abc': not an integer"},
      {"warps=4x", "warps='4x': not an integer"},
      {"stages=", "stages='': not an integer"},
      {"block_n=1.5", "block_n='1.5': not an integer"},
      {"block_m=99999999999", "block_m='99999999999': not an integer"},
      {"block_m", "'block_m': expected field=value"},
      {"=64", "unknown field ''"},
      {"block_m=64,,warps=4", "empty item"},
      {"block_m=64,", "empty item"},
      {"warps=4,warps=8", "warps given twice"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    const Error e = test::expect_error([&] { parse_tile_override(c.text, "FLASHRTC_CONFIG"); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.message().find(c.names) != std::string::npos);
    CHECK(e.message().rfind("FLASHRTC_CONFIG='", 0) == 0);
  }
  const Error named = test::expect_error([] { parse_tile_override("warps=x", "--config"); });
  CHECK(named.message().rfind("--config='warps=x'", 0) == 0);
}

TEST_CASE("FLASHRTC_CONFIG and FLASHRTC_TUNE_DB are read from the environment") {
  ::setenv("FLASHRTC_CONFIG", "warps=4", 1);
  ::setenv("FLASHRTC_TUNE_DB", "/tmp/somewhere/db.json", 1);
  const RuntimeConfig config = RuntimeConfig::from_environment();
  ::unsetenv("FLASHRTC_CONFIG");
  ::unsetenv("FLASHRTC_TUNE_DB");
  CHECK(config.config_override == "warps=4");
  CHECK(config.tune_db == "/tmp/somewhere/db.json");
  const RuntimeConfig unset = RuntimeConfig::from_environment();
  CHECK(unset.config_override.empty());
  CHECK(unset.tune_db.empty());
}

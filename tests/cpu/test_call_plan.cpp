// One plan per call: a repeated call costs one memo lookup (no compile, no module load, no resolution), calls
// in one length bucket share a plan while the grid follows each call, and whatever changes how a call
// resolves (set_runtime_config, a new tuning-database entry, an explicit tile) reaches the next call.
// Runs against the fake driver (tests/cpu/helpers/fake_driver.hpp): NVRTC compiles for real, nothing runs.
#include <doctest/doctest.h>

#include <string>

#include "cpu/helpers/fake_driver.hpp"
#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/attention.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/tuning_db.hpp"

using namespace flashrtc;
using test::FakeDriver;

namespace {

ForwardParams params(std::int64_t seqlen_q, std::int64_t seqlen_kv, void* stream) {
  ForwardParams p;
  p.dtype = DType::kFloat32;  // the SIMT family: its small tiles compile quickly
  p.batch = 1;
  p.seqlen_q = seqlen_q;
  p.seqlen_kv = seqlen_kv;
  p.heads_q = 2;
  p.heads_kv = 2;
  p.head_dim = 32;
  // Never dereferenced: the fake runs nothing.
  p.q = TensorRef::bnhd(reinterpret_cast<const void*>(0x100000), seqlen_q, 2, 32);
  p.k = TensorRef::bnhd(reinterpret_cast<const void*>(0x200000), seqlen_kv, 2, 32);
  p.v = TensorRef::bnhd(reinterpret_cast<const void*>(0x300000), seqlen_kv, 2, 32);
  p.o = TensorRef::bnhd(reinterpret_cast<const void*>(0x400000), seqlen_q, 2, 32);
  p.stream = stream;
  return p;
}

unsigned threads_of_last_launch(const FakeDriver& fake) { return fake.launches().back().block[0]; }
unsigned grid_of_last_launch(const FakeDriver& fake) { return fake.launches().back().grid[0]; }

}  // namespace

TEST_CASE("a repeated call is one lookup; calls of one bucket share the plan, not the grid") {
  test::TempDir dir;
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  FakeDriver fake;
  Stream stream;
  const ForwardParams p = params(1000, 1000, stream.handle());
  attention_forward(p);
  const CacheStats first = cache_stats();
  const int loads = fake.calls("cuModuleLoadData");
  const int attribute_sets = fake.calls("cuFuncSetAttribute");
  const int device_queries = fake.calls("cuDeviceGetAttribute");
  for (int i = 0; i < 5; ++i) attention_forward(p);
  const CacheStats later = cache_stats();
  // Nothing but the launch: no compile, no cache lookup, no module load, no device query.
  CHECK(later.compiles == first.compiles);
  CHECK(later.disk_hits == first.disk_hits);
  CHECK(later.memory_hits == first.memory_hits);
  CHECK(fake.calls("cuModuleLoadData") == loads);
  CHECK(fake.calls("cuFuncSetAttribute") == attribute_sets);
  CHECK(fake.calls("cuDeviceGetAttribute") == device_queries);
  CHECK(fake.launches().size() == 6);

  // 600 queries share 1000's bucket (1024): same plan, a smaller grid.
  const unsigned grid_1000 = grid_of_last_launch(fake);
  attention_forward(params(600, 1000, stream.handle()));
  CHECK(cache_stats().memory_hits == first.memory_hits);
  CHECK(grid_of_last_launch(fake) < grid_1000);
  const TileConfig tile = select_forward_spec(p).tile;
  CHECK(grid_of_last_launch(fake) == static_cast<unsigned>(2 * ((600 + tile.block_m - 1) / tile.block_m)));
}

TEST_CASE("set_runtime_config, a tuned entry and an explicit tile reach the next call") {
  test::TempDir dir;
  RuntimeConfig base = test::config_with_cache_dir(dir.path());
  base.tune_db = dir.path() / "tuning_db.json";
  test::ConfigOverride config(base);
  FakeDriver fake;
  Stream stream;
  ForwardParams p = params(300, 300, stream.handle());
  attention_forward(p);
  const TileConfig default_tile = select_forward_spec(p).tile;
  CHECK(threads_of_last_launch(fake) == static_cast<unsigned>(default_tile.warps * 32));

  // FLASHRTC_CONFIG set in code: the memoized call resolves again.
  const int override_warps = default_tile.warps == 8 ? 4 : 8;
  TileConfig overridden = default_tile;
  overridden.warps = override_warps;
  REQUIRE(check_forward_config(p.dtype, 32, overridden, kSmemBytesSm90).empty());
  RuntimeConfig with_override = base;
  with_override.config_override = "warps=" + std::to_string(override_warps);
  set_runtime_config(with_override);
  attention_forward(p);
  CHECK(threads_of_last_launch(fake) == static_cast<unsigned>(override_warps * 32));
  set_runtime_config(base);
  attention_forward(p);
  CHECK(threads_of_last_launch(fake) == static_cast<unsigned>(default_tile.warps * 32));

  // A tuning-database entry for this (fake) GPU: the next call uses it.
  const DeviceInfo device = current_device();
  TuningEntry entry;
  entry.key = make_tuning_key(device.name, device.arch, p.dtype, 32, p.mask, p.seqlen_q, p.seqlen_kv);
  entry.config = {32, 32, default_tile.warps == 8 ? 4 : 8, 1};
  entry.median_ms = 1, entry.tflops = 1, entry.batch = 1, entry.heads = 2, entry.seqlen_q = 300, entry.seqlen_kv = 300;
  entry.space = "quick";
  REQUIRE(check_forward_config(p.dtype, 32, entry.config, kSmemBytesSm90).empty());
  record_tuning_entry(entry);
  attention_forward(p);
  CHECK(threads_of_last_launch(fake) == static_cast<unsigned>(entry.config.warps * 32));

  // An explicit tile is a call of its own, and an unbuildable one is refused before anything launches.
  p.config = TileConfig{16, 16, 2, 1};
  attention_forward(p);
  CHECK(threads_of_last_launch(fake) == 64u);
  const std::size_t launched = fake.launches().size();
  p.config = TileConfig{16, 16, 3, 1};
  const Error e = test::expect_error([&] { attention_forward(p); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(e.message().find("warps") != std::string::npos);
  CHECK(fake.launches().size() == launched);
}

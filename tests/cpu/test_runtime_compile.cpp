// Every shipped forward specialization compiles under NVRTC (no GPU needed) for sm_80 and sm_90a, with a
// ptxas resource report, no spills and a shared-memory plan that fits sm_80; invalid specs are refused
// before anything is compiled.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/mma_forward_shape.cuh"
#include "flashrtc/simt_forward_shape.cuh"
#include "flashrtc/tile_config.hpp"

using namespace flashrtc;

namespace {

constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr int kHeadDims[] = {32, 64, 96, 128, 256};
constexpr MaskKind kMasks[] = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};
const char* const kArchs[] = {"sm_80", "sm_90a"};

struct Job {
  KernelSpec spec;
  std::string arch;
  std::optional<CompiledKernelInfo> info;
  std::string error;
};

std::string describe(const Job& job) {
  return std::string(to_string(job.spec.dtype)) + " d=" + std::to_string(job.spec.head_dim) + " " +
         std::string(to_string(job.spec.mask)) + " " + to_string(job.spec.tile) + " " + job.arch;
}

// Memory-only cache, so each run compiles for real instead of reading an old disk entry.
RuntimeConfig memory_only_config() {
  RuntimeConfig config = runtime_config();
  config.disk_cache = false;
  config.always_compile = false;
  config.require_cached = false;
  return config;
}

SimtForwardShape shape_of(int head_dim, const TileConfig& c) { return {head_dim, c.block_m, c.block_n, c.warps, c.stages}; }

// (fp32 accumulators per thread, the part of them that is O) for the family that runs dtype, and the
// family's limit on the first.
struct RegisterTile {
  int accumulators, o_part, limit;
};
RegisterTile register_tile(DType dtype, int head_dim, const TileConfig& c) {
  if (portable_family(Operation::kForward, dtype).name == "mma") {
    const MmaForwardShape shape{head_dim, c.block_m, c.block_n, c.warps, c.stages};
    return {shape.o_floats() + shape.s_floats(), shape.o_floats(), 192};
  }
  const SimtForwardShape shape = shape_of(head_dim, c);
  return {shape.accumulator_floats(), shape.rows_per_thread(), 128};
}

}  // namespace

std::size_t smem_limit(const std::string& arch) {
  return arch == "sm_80" ? kSmemBytesSm80 : kSmemBytesSm90;
}

TEST_CASE("every default forward specialization compiles for sm_80 and sm_90a without spills") {
  test::ConfigOverride config(memory_only_config());

  // For each arch, the tile a GPU of that arch gets by default (its opt-in shared memory decides), plus the
  // device-independent default (sm_80's limit) that select_forward_spec picks without a device.
  std::vector<Job> jobs;
  for (DType dtype : kDtypes)
    for (int head_dim : kHeadDims)
      for (MaskKind mask : kMasks)
        for (const char* arch : kArchs) {
          std::vector<TileConfig> tiles = {default_forward_config(dtype, head_dim, mask),
                                           default_forward_config(dtype, head_dim, mask, smem_limit(arch))};
          if (tiles[1] == tiles[0]) tiles.pop_back();
          for (const TileConfig& tile : tiles) {
            Job job;
            job.spec.dtype = dtype;
            job.spec.head_dim = head_dim;
            job.spec.mask = mask;
            job.spec.tile = tile;
            job.arch = arch;
            jobs.push_back(std::move(job));
          }
        }
  REQUIRE(jobs.size() >= 90);

  const CacheStats before = cache_stats();
  // Two workers: NVRTC compiles are independent, and the build machines have 2 cores.
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      try {
        jobs[i].info = compile_kernel(jobs[i].spec, jobs[i].arch);
      } catch (const std::exception& e) {
        jobs[i].error = e.what();
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  const CacheStats after = cache_stats();

  std::size_t compiled = 0;
  for (const Job& job : jobs) {
    INFO(describe(job));
    // The plain default runs everywhere (sm_80's 163 KB); an arch's own default fits that arch.
    CHECK(forward_smem_bytes(job.spec.dtype, job.spec.head_dim,
                             default_forward_config(job.spec.dtype, job.spec.head_dim, job.spec.mask)) <=
          kSmemBytesSm80);
    CHECK(check_forward_config(job.spec.dtype, job.spec.head_dim, job.spec.tile, smem_limit(job.arch)) == "");
    CHECK(forward_smem_bytes(job.spec.dtype, job.spec.head_dim, job.spec.tile) <= smem_limit(job.arch));
    CHECK(job.error == "");
    if (!job.info) continue;
    const CompiledKernelInfo& info = *job.info;
    INFO("registers=" << info.resources.registers
                      << " stack_frame_bytes=" << info.resources.stack_frame_bytes);
    CHECK(info.arch == job.arch);
    CHECK(info.name_expression == kernel_name_expression(job.spec));
    CHECK_FALSE(info.lowered_name.empty());
    CHECK(info.key.size() >= 32);
    CHECK(info.entry_dir.empty());  // disk cache off
    CHECK(info.resources.registers > 0);
    CHECK(info.resources.registers <= 255);
    CHECK(info.resources.spill_store_bytes == 0);
    CHECK(info.resources.spill_load_bytes == 0);
    if (info.source == CacheSource::kCompiled) {
      ++compiled;
      CHECK(info.compile_ms > 0);
    }
  }
  CHECK(after.compiles - before.compiles == compiled);

  // Each (spec, arch) is a distinct kernel with a distinct key: sm_80 and sm_90a builds of one spec included.
  std::set<std::string> keys;
  for (const Job& job : jobs)
    if (job.info) keys.insert(job.info->key);
  CHECK(keys.size() == jobs.size());
}

TEST_CASE("the largest register tile that check_forward_config accepts still compiles") {
  test::ConfigOverride config(memory_only_config());
  const struct {
    DType dtype;
    int head_dim;
  } cases[] = {{DType::kFloat32, 256}, {DType::kFloat16, 128}, {DType::kBFloat16, 256}};
  for (const auto& c : cases) {
    const auto space = forward_config_space(c.dtype, c.head_dim, kSmemBytesSm90);
    REQUIRE_FALSE(space.empty());
    // Most accumulators per thread; among equals, most query rows per thread (the most live O registers).
    const TileConfig biggest =
        *std::max_element(space.begin(), space.end(), [&](const TileConfig& x, const TileConfig& y) {
          const RegisterTile rx = register_tile(c.dtype, c.head_dim, x), ry = register_tile(c.dtype, c.head_dim, y);
          return std::make_pair(rx.accumulators, rx.o_part) < std::make_pair(ry.accumulators, ry.o_part);
        });
    const RegisterTile tile = register_tile(c.dtype, c.head_dim, biggest);
    INFO(to_string(c.dtype) << " d=" << c.head_dim << " " << to_string(biggest) << ": " << tile.accumulators
                            << " accumulators per thread");
    CHECK(tile.accumulators <= tile.limit);
    CHECK(check_forward_config(c.dtype, c.head_dim, biggest, kSmemBytesSm90) == "");

    KernelSpec spec;
    spec.dtype = c.dtype;
    spec.head_dim = c.head_dim;
    spec.mask = MaskKind::kCausalBottomRight;
    spec.tile = biggest;
    CompiledKernelInfo info;
    REQUIRE_NOTHROW(info = compile_kernel(spec, "sm_90a"));
    // ptxas caps a thread at 255 registers; beyond that it may spill (a warning, not a failure), but the
    // kernel must still build and report its resources.
    CHECK(info.resources.registers > 0);
    CHECK(info.resources.registers <= 255);
    if (info.resources.spills())
      MESSAGE(to_string(biggest) << " spills " << info.resources.spill_store_bytes
                                 << " bytes at d=" << c.head_dim);
  }
}

TEST_CASE("a tile one step past the accumulator limit is refused without compiling") {
  test::ConfigOverride config(memory_only_config());
  // d=256, 4 warps: 8 row groups of 16 threads; block_m=64 gives 8 rows x (16 dims + 4 columns) = 160 > 128.
  const TileConfig over{64, 64, 4, 1};
  REQUIRE(shape_of(256, over).accumulator_floats() > 128);
  CHECK(check_forward_config(DType::kFloat32, 256, over, kSmemBytesSm90) != "");
  KernelSpec spec;
  spec.dtype = DType::kFloat32;
  spec.head_dim = 256;
  spec.tile = over;
  const CacheStats before = cache_stats();
  const Error e = test::expect_error([&] { compile_kernel(spec, "sm_90a"); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(cache_stats().compiles == before.compiles);
}

TEST_CASE("invalid specs and archs throw kInvalidArgument naming the field, before compiling") {
  test::ConfigOverride config(memory_only_config());
  KernelSpec good;
  good.dtype = DType::kFloat16;
  good.head_dim = 64;
  good.tile = default_forward_config(good.dtype, good.head_dim, MaskKind::kNone);

  struct Case {
    const char* what;
    KernelSpec spec;
    std::string arch;
    const char* names;  // the message must name this
  };
  std::vector<Case> cases;
  auto with = [&](const char* what, auto mutate, std::string arch, const char* names) {
    KernelSpec spec = good;
    mutate(spec);
    cases.push_back({what, spec, std::move(arch), names});
  };
  auto same = [](KernelSpec&) {};
  with(
      "head_dim 7", [](KernelSpec& s) { s.head_dim = 7; }, "sm_80", "head_dim");
  with(
      "head_dim 264", [](KernelSpec& s) { s.head_dim = 264; }, "sm_80", "head_dim");
  with(
      "head_dim 0", [](KernelSpec& s) { s.head_dim = 0; }, "sm_90a", "head_dim");
  with(
      "block_n 12", [](KernelSpec& s) { s.tile.block_n = 12; }, "sm_80", "block_n");
  with(
      "block_n 0", [](KernelSpec& s) { s.tile.block_n = 0; }, "sm_80", "block_n");
  with(
      "block_m 300", [](KernelSpec& s) { s.tile.block_m = 300; }, "sm_80", "block_m");
  with(
      "warps 3", [](KernelSpec& s) { s.tile.warps = 3; }, "sm_80", "warps");
  with(
      "stages 3", [](KernelSpec& s) { s.tile.stages = 3; }, "sm_80", "stages");
  with(
      "smem over sm_90's 227 KB",
      [](KernelSpec& s) {
        s.dtype = DType::kFloat32;
        s.head_dim = 256;
        s.tile = {128, 128, 16, 2};
      },
      "sm_90a", "shared memory");
  with("arch sm_75", same, "sm_75", "arch");
  with("arch sm_70", same, "sm_70", "arch");
  with("arch garbage", same, "garbage", "arch");
  with("arch empty", same, "", "arch");
  with("arch sm_90x", same, "sm_90x", "arch");
  with("arch compute_90", same, "compute_90", "arch");

  const CacheStats before = cache_stats();
  for (const Case& c : cases) {
    INFO(c.what);
    const Error e = test::expect_error([&] { compile_kernel(c.spec, c.arch); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.message().find(c.names) != std::string::npos);
  }
  CHECK(cache_stats().compiles == before.compiles);
}

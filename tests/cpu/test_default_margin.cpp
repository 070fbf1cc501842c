// Every default tile of every kernel family in the table compiles under this build's NVRTC for sm_80, sm_90a,
// sm_100 and sm_120 without spills, within kDefaultMaxRegisters registers (docs/RELIABILITY.md, "Register
// margin of the defaults") and without ptxas serializing its wgmma.mma_async instructions. Families come
// from kernel_families(), so a family added to the table is held to the margin without a change here.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tuning_space.hpp"

using namespace flashrtc;

namespace {

const char* const kArchs[] = {"sm_80", "sm_90a", "sm_100", "sm_120"};

struct Job {
  std::string arch;
  KernelSpec spec;
  ResourceReport resources;
  bool compiled = false;
  std::string error;
};

std::string describe(const Job& job) {
  return job.arch + " " + job.spec.family->name + " " + std::string(to_string(job.spec.dtype)) +
         " d=" + std::to_string(job.spec.head_dim) + " " + std::string(to_string(job.spec.mask)) + " " +
         to_string(job.spec.tile) + (job.spec.persistent ? " persistent" : "");
}

// For each arch, each family that runs there, each of its dtypes and default rows (at the row's largest head
// dim, where its tiles hold the most accumulators) and each mask the row serves: every kernel default_specs
// gives for the arch's shared memory (each default tile on each grid it may run on), whatever the key length. A row that an earlier one shadows for a
// mask (the same head dims, restricted to that mask) is never read for it, so it is not compiled for it.
std::vector<Job> default_jobs() {
  std::vector<Job> jobs;
  for (const char* arch : kArchs) {
    const std::size_t smem = assumed_sm_limits(arch).smem_per_block_bytes;
    for (const KernelFamily* family : kernel_families()) {
      if (!family->arch_mismatch(arch).empty()) continue;
      for (DType dtype : family->dtypes)
        for (const KernelFamily::DefaultRow& row : family->defaults) {
          if (!family->serves_head_dim(row.max_head_dim)) continue;
          for (MaskKind mask : kMaskKinds) {
            if (!row.serves_mask(mask) || &family->default_row(row.max_head_dim, mask) != &row) continue;
            for (const KernelSpec& spec : family->default_specs(dtype, row.max_head_dim, mask, smem, arch)) {
              Job job;
              job.arch = arch;
              job.spec = spec;
              jobs.push_back(std::move(job));
            }
          }
        }
    }
  }
  return jobs;
}

}  // namespace

TEST_CASE(
    "every default of every family compiles within the register margin, without spills and without "
    "serialized wgmma on each arch") {
  // Memory only: every run compiles with the NVRTC at hand instead of reading an older disk entry.
  RuntimeConfig config = runtime_config();
  config.disk_cache = false;
  config.always_compile = false;
  config.require_cached = false;
  test::ConfigOverride scoped(config);

  std::vector<Job> jobs = default_jobs();
  // Each arch has defaults of at least the two built-in forward families, all dtypes and masks.
  for (const char* arch : kArchs) {
    INFO(arch);
    CHECK(std::count_if(jobs.begin(), jobs.end(), [&](const Job& j) { return j.arch == arch; }) >= 36);
  }

  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      try {
        jobs[i].resources = compile_kernel(jobs[i].spec, jobs[i].arch).resources;
        jobs[i].compiled = true;
      } catch (const std::exception& e) {
        jobs[i].error = e.what();
      }
    }
  };
  // NVRTC compiles are independent; CI has 2 cores.
  std::vector<std::thread> workers(std::max(2u, std::thread::hardware_concurrency()));
  for (std::thread& t : workers) t = std::thread(worker);
  for (std::thread& t : workers) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE(jobs.size() << " default specializations compiled for " << std::size(kArchs) << " archs in "
                      << seconds << " s on " << workers.size() << " threads");

  for (const Job& job : jobs) {
    INFO(describe(job));
    CHECK(job.error == "");
    if (!job.compiled) continue;
    const ResourceReport& r = job.resources;
    INFO("registers=" << r.registers << " spill stores=" << r.spill_store_bytes
                      << " spill loads=" << r.spill_load_bytes
                      << " wgmma serialized: " << (r.wgmma_serialized ? r.wgmma_serialized_reason : "no"));
    CHECK(r.registers > 0);  // the ptxas report was read
    CHECK(r.registers <= kDefaultMaxRegisters);
    CHECK(r.spill_store_bytes == 0);
    CHECK(r.spill_load_bytes == 0);
    CHECK_FALSE(r.wgmma_serialized);
  }
}

TEST_CASE("the margin check compiles a row only under the masks it serves, and every one of them") {
  const std::vector<Job> jobs = default_jobs();
  const auto has = [&](const char* family, MaskKind mask, const TileConfig& tile) {
    return std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) {
      return j.arch == "sm_90a" && j.spec.family->name == family && j.spec.dtype == DType::kBFloat16 &&
             j.spec.head_dim == 256 && j.spec.mask == mask && j.spec.tile == tile;
    });
  };
  CHECK(has("wgmma", MaskKind::kNone, {128, 80, 12, 2}));
  // The unrestricted d<=256 row comes after the one for no mask, which shadows it there.
  CHECK_FALSE(has("wgmma", MaskKind::kNone, {128, 64, 12, 2}));
  for (MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
    CHECK(has("wgmma", mask, {128, 64, 12, 2}));
    CHECK_FALSE(has("wgmma", mask, {128, 80, 12, 2}));
  }
  // Every (row, mask) a row serves and is read for is in the list.
  for (const KernelFamily* family : kernel_families()) {
    if (!family->arch_mismatch("sm_90a").empty()) continue;
    for (const KernelFamily::DefaultRow& row : family->defaults)
      for (MaskKind mask : kMaskKinds) {
        // A row is read only for the masks it serves (a decode family serves no top-left causal mask).
        if (!family->serves_head_dim(row.max_head_dim) || !row.serves_mask(mask) ||
            &family->default_row(row.max_head_dim, mask) != &row)
          continue;
        INFO(family->name << " " << row.text() << " " << to_string(mask));
        CHECK(std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) {
          return j.arch == "sm_90a" && j.spec.family == family && j.spec.head_dim == row.max_head_dim &&
                 j.spec.mask == mask;
        }));
      }
  }
}

TEST_CASE("a default candidate applies only to the archs of its range, and to long enough key sequences") {
  const KernelFamily& mma = portable_family(Operation::kForward, DType::kBFloat16);
  KernelFamily family = mma;
  family.name = "margin-probe";
  family.defaults = {{64,
                      {{{128, 64, 4, 2}, 0, 0, 0, 90}, {{64, 64, 4, 2}, 0, 0, 100, 110}, {{64, 32, 4, 2}}},
                      "three ranges"}};
  const auto tile_for = [&](const char* arch) {
    return family.default_config(DType::kBFloat16, 64, MaskKind::kNone, kSmemBytesSm90, 0, arch);
  };
  CHECK(tile_for("sm_80") == TileConfig{128, 64, 4, 2});
  CHECK(tile_for("sm_90a") == TileConfig{128, 64, 4, 2});
  CHECK(tile_for("") == TileConfig{128, 64, 4, 2});  // no arch: judged as sm_80
  CHECK(tile_for("sm_100") == TileConfig{64, 64, 4, 2});
  CHECK(tile_for("sm_110") == TileConfig{64, 64, 4, 2});
  CHECK(tile_for("sm_120") == TileConfig{64, 32, 4, 2});
  CHECK(family.default_configs(DType::kBFloat16, 64, MaskKind::kNone, kSmemBytesSm90, "sm_120") ==
        std::vector<TileConfig>{{64, 32, 4, 2}});

  // Both conditions at once (no built-in row has a key-length minimum now).
  family.defaults = {{64, {{{128, 96, 4, 2}, 0, 1024, 90, 90}, {{128, 64, 4, 2}}}, "long keys on sm_90"}};
  const auto tile_at = [&](std::int64_t seqlen_kv, const char* arch) {
    return family.default_config(DType::kBFloat16, 64, MaskKind::kNone, kSmemBytesSm90, seqlen_kv, arch);
  };
  CHECK(tile_at(4096, "sm_90a") == TileConfig{128, 96, 4, 2});
  CHECK(tile_at(0, "sm_90a") == TileConfig{128, 96, 4, 2});
  CHECK(tile_at(512, "sm_90a") == TileConfig{128, 64, 4, 2});
  CHECK(tile_at(4096, "sm_100") == TileConfig{128, 64, 4, 2});
  CHECK(tile_at(4096, "sm_80") == TileConfig{128, 64, 4, 2});
  CHECK(family.default_configs(DType::kBFloat16, 64, MaskKind::kNone, kSmemBytesSm90, "sm_90a") ==
        std::vector<TileConfig>{{128, 96, 4, 2}, {128, 64, 4, 2}});
  CHECK(family.default_configs(DType::kBFloat16, 64, MaskKind::kNone, kSmemBytesSm90, "sm_100") ==
        std::vector<TileConfig>{{128, 64, 4, 2}});
}

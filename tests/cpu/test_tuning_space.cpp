// The tuner's candidate space and occupancy arithmetic: every candidate fits the limits it was enumerated
// for (shared memory, threads, resident blocks), quick is a subset of full around the default, and the
// warm-up list of a deployment includes the tuned tiles.
#include <doctest/doctest.h>

#include <algorithm>
#include <tuple>

#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/tuning_db.hpp"
#include "flashrtc/tuning_space.hpp"

using namespace flashrtc;

namespace {

bool contains(const std::vector<TileConfig>& configs, const TileConfig& c) {
  return std::find(configs.begin(), configs.end(), c) != configs.end();
}

constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr int kHeadDims[] = {32, 64, 128, 256};

}  // namespace

TEST_CASE("tuning space: every candidate fits the shared memory, threads and SM it was enumerated for") {
  const SmLimits h100 = assumed_sm_limits("sm_90a");
  SmLimits small = h100;
  small.smem_per_block_bytes = 48 * 1024;
  SmLimits few_threads = h100;
  few_threads.max_threads_per_block = 128;
  SmLimits small_sm = h100;
  small_sm.smem_per_sm_bytes = 64 * 1024;  // the per-block opt-in stays larger: the SM is the bound

  for (DType dtype : kDtypes)
    for (int head_dim : kHeadDims) {
      INFO(to_string(dtype) << " d=" << head_dim);
      const auto full = tuning_candidates(dtype, head_dim, 4096, 4096, TuneSpace::kFull, h100);
      REQUIRE_FALSE(full.empty());
      CHECK(std::is_sorted(full.begin(), full.end(), [](const TileConfig& a, const TileConfig& b) {
        return std::tie(a.block_m, a.block_n, a.warps, a.stages) < std::tie(b.block_m, b.block_n, b.warps, b.stages);
      }));
      for (const TileConfig& c : full) {
        INFO(to_string(c));
        CHECK(check_forward_config(dtype, head_dim, c, h100.smem_per_block_bytes) == "");
        CHECK(forward_smem_bytes(dtype, head_dim, c) <= h100.smem_per_block_bytes);
        CHECK(resident_blocks_per_sm(h100, c.warps * 32, 0, forward_smem_bytes(dtype, head_dim, c)) >= 1);
      }
      // Everything the family offers that fits is there, and the default.
      for (const TileConfig& c : forward_config_space(dtype, head_dim, h100.smem_per_block_bytes))
        CHECK(contains(full, c));
      CHECK(contains(full,
                     default_forward_config(dtype, head_dim, MaskKind::kNone, h100.smem_per_block_bytes)));

      for (const SmLimits* limits : {&small, &few_threads, &small_sm}) {
        const auto bounded = tuning_candidates(dtype, head_dim, 4096, 4096, TuneSpace::kFull, *limits);
        CHECK(bounded.size() <= full.size());
        for (const TileConfig& c : bounded) {
          INFO(to_string(c));
          CHECK(contains(full, c));
          CHECK(c.warps * 32 <= limits->max_threads_per_block);
          CHECK(forward_smem_bytes(dtype, head_dim, c) <= limits->smem_per_block_bytes);
          CHECK(forward_smem_bytes(dtype, head_dim, c) + limits->reserved_smem_per_block_bytes <=
                limits->smem_per_sm_bytes);
        }
        // And nothing that fits is left out.
        for (const TileConfig& c : full) {
          const std::size_t smem = forward_smem_bytes(dtype, head_dim, c);
          if (c.warps * 32 <= limits->max_threads_per_block && smem <= limits->smem_per_block_bytes &&
              smem + limits->reserved_smem_per_block_bytes <= limits->smem_per_sm_bytes)
            CHECK(contains(bounded, c));
        }
      }
    }
}

TEST_CASE("tuning space: quick is a smaller subset of full with the default, bounded by the sequence lengths") {
  const SmLimits limits = assumed_sm_limits("sm_90a");
  for (DType dtype : kDtypes)
    for (int head_dim : kHeadDims) {
      INFO(to_string(dtype) << " d=" << head_dim);
      const auto full = tuning_candidates(dtype, head_dim, 4096, 4096, TuneSpace::kFull, limits);
      const auto quick = tuning_candidates(dtype, head_dim, 4096, 4096, TuneSpace::kQuick, limits);
      REQUIRE_FALSE(quick.empty());
      CHECK(quick.size() <= full.size());
      if (full.size() > 8) CHECK(quick.size() < full.size());
      for (const TileConfig& c : quick) CHECK(contains(full, c));
      CHECK(contains(quick,
                     default_forward_config(dtype, head_dim, MaskKind::kNone, limits.smem_per_block_bytes)));

      // Short sequences: no tile taller than the query bucket unless nothing smaller exists.
      const auto short_q = tuning_candidates(dtype, head_dim, 20, 4096, TuneSpace::kQuick, limits);
      REQUIRE_FALSE(short_q.empty());
      int smallest_m = full.front().block_m;
      for (const TileConfig& c : full) smallest_m = std::min(smallest_m, c.block_m);
      const TileConfig fallback =
          default_forward_config(dtype, head_dim, MaskKind::kNone, limits.smem_per_block_bytes);
      for (const TileConfig& c : short_q)
        if (!(c == fallback)) CHECK(c.block_m <= std::max(32, smallest_m));
    }
}

TEST_CASE("occupancy: resident blocks are bounded by threads, registers, shared memory and the block limit") {
  SmLimits sm;  // sm_80-like: 2048 threads, 32 blocks, 64 K registers, 164 KB per SM, 1 KB reserved per block
  sm.smem_per_block_bytes = 163 * 1024;
  CHECK(resident_blocks_per_sm(sm, 256, 0, 0) == 8);           // threads: 2048 / 256
  CHECK(resident_blocks_per_sm(sm, 32, 0, 0) == 32);           // the block limit
  CHECK(resident_blocks_per_sm(sm, 256, 128, 0) == 2);         // 128 x 32 = 4096 per warp: 16 warps
  CHECK(resident_blocks_per_sm(sm, 256, 121, 0) == 2);         // rounded up to 128 per thread
  CHECK(resident_blocks_per_sm(sm, 256, 64, 0) == 4);
  CHECK(resident_blocks_per_sm(sm, 128, 255, 0) == 2);         // 8192 per warp: 8 warps
  CHECK(resident_blocks_per_sm(sm, 256, 255, 0) == 1);
  CHECK(resident_blocks_per_sm(sm, 512, 255, 0) == 0);         // 16 warps of 255 registers do not fit
  CHECK(resident_blocks_per_sm(sm, 128, 256, 0) == 0);         // over the per-thread maximum
  CHECK(resident_blocks_per_sm(sm, 128, 32, 80 * 1024) == 2);  // (80 + 1) KB per block in 164 KB
  CHECK(resident_blocks_per_sm(sm, 128, 32, 81 * 1024) == 2);
  CHECK(resident_blocks_per_sm(sm, 128, 32, 82 * 1024) == 1);
  CHECK(resident_blocks_per_sm(sm, 128, 32, 164 * 1024) == 0);  // over the per-block opt-in
  CHECK(resident_blocks_per_sm(sm, 1025, 0, 0) == 0);
  CHECK(resident_blocks_per_sm(sm, 0, 0, 0) == 0);
  CHECK(occupancy(sm, 256, 2) == doctest::Approx(0.25));
  CHECK(occupancy(sm, 256, 8) == doctest::Approx(1.0));
}

TEST_CASE("assumed limits per arch, for machines without the GPU") {
  CHECK(assumed_sm_limits("sm_80").smem_per_block_bytes == kSmemBytesSm80);
  CHECK(assumed_sm_limits("sm_90a").smem_per_block_bytes == kSmemBytesSm90);
  CHECK(assumed_sm_limits("sm_90").smem_per_block_bytes == kSmemBytesSm90);
  CHECK(assumed_sm_limits("sm_100a").smem_per_block_bytes == kSmemBytesSm90);
  CHECK(assumed_sm_limits("sm_86").smem_per_block_bytes == 99 * 1024);
  CHECK(assumed_sm_limits("sm_86").max_threads_per_sm == 1536);
  CHECK(assumed_sm_limits("sm_120").smem_per_block_bytes == 99 * 1024);
  CHECK(assumed_sm_limits("garbage").smem_per_block_bytes == kSmemBytesSm80);
  CHECK(parse_tune_space("quick") == TuneSpace::kQuick);
  CHECK(parse_tune_space("full") == TuneSpace::kFull);
  CHECK_FALSE(parse_tune_space("fast").has_value());
}

TEST_CASE("warm specs: every default for the arch, plus the tuned tiles of that arch and NVRTC") {
  test::TuningSandbox sandbox("flashrtc-warm-specs");
  const auto all_defaults = warm_specs("sm_90a");
  std::vector<KernelSpec> defaults;  // the forward's; the backward families' are checked below
  for (const KernelSpec& s : all_defaults)
    if (s.family->operation == Operation::kForward) defaults.push_back(s);
  // Each backward family warms its own defaults: the main kernels per mask, the row passes once.
  const KernelFamily& bwd = portable_family(Operation::kBackward, DType::kBFloat16);
  CHECK(std::count_if(all_defaults.begin(), all_defaults.end(),
                      [&](const KernelSpec& s) { return s.family == &bwd; }) == 2 * 5 * 3);
  const KernelFamily& prep = portable_family(Operation::kBackwardPrep, DType::kFloat32);
  CHECK(std::count_if(all_defaults.begin(), all_defaults.end(),
                      [&](const KernelSpec& s) { return s.family == &prep; }) == 3 * 5);
  // Every default of every forward family that runs on sm_90a (the Hopper one and the ones calls fall back
  // to): for long (or unknown) key sequences, and for short ones where the tile or the grid differs.
  std::size_t expected = 0;
  for (const KernelFamily* family : kernel_families())
    if (family->operation == Operation::kForward && family->arch_mismatch("sm_90a").empty())
      for (DType dtype : family->dtypes)
        for (int head_dim : warm_head_dims(*family))
          for (MaskKind mask : kMaskKinds)
            expected += family->default_specs(dtype, head_dim, mask, kSmemBytesSm90, "sm_90a").size();
  CHECK(defaults.size() == expected);
  // The Hopper family's grid: persistent for every call; at d=128 128x128 below 4096 keys, from there 192x80
  // (three consumer groups) without a mask and 128x160 under a causal one.
  const KernelFamily* hopper = find_kernel_family("wgmma");
  REQUIRE(hopper);
  const auto hopper_warmed = [&](MaskKind mask, const TileConfig& tile, bool persistent) {
    return std::count_if(defaults.begin(), defaults.end(), [&](const KernelSpec& s) {
      return s.family == hopper && s.dtype == DType::kBFloat16 && s.head_dim == 128 && s.mask == mask &&
             s.tile == tile && s.persistent == persistent;
    });
  };
  CHECK(hopper_warmed(MaskKind::kNone, {128, 128, 12, 2}, true) == 1);
  CHECK(hopper_warmed(MaskKind::kNone, {128, 160, 12, 2}, true) == 0);
  CHECK(hopper_warmed(MaskKind::kNone, {192, 80, 16, 3}, true) == 1);
  CHECK(hopper_warmed(MaskKind::kNone, {192, 80, 16, 3}, false) == 0);
  for (MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
    CHECK(hopper_warmed(mask, {128, 160, 12, 2}, true) == 1);
    CHECK(hopper_warmed(mask, {128, 128, 12, 2}, true) == 1);
    CHECK(hopper_warmed(mask, {128, 160, 12, 2}, false) == 0);
    CHECK(hopper_warmed(mask, {128, 128, 12, 2}, false) == 0);
    CHECK(hopper_warmed(mask, {192, 80, 16, 3}, true) == 0);
  }
  const KernelFamily* wgmma = find_kernel_family("wgmma");
  const auto warmed_at = [&](int head_dim, MaskKind mask, const TileConfig& tile) {
    return std::any_of(defaults.begin(), defaults.end(), [&](const KernelSpec& s) {
      return s.family == wgmma && s.dtype == DType::kBFloat16 && s.head_dim == head_dim && s.mask == mask &&
             s.tile == tile;
    });
  };
  // The Hopper family's rows between d = 128 and 256 are warmed too, not only the five usual head dims.
  CHECK(warm_head_dims(*wgmma) == std::vector<int>{64, 96, 128, 160, 192, 224, 256});
  CHECK(warmed_at(160, MaskKind::kNone, {128, 128, 12, 2}));
  CHECK(warmed_at(192, MaskKind::kCausalTopLeft, {128, 64, 12, 2}));
  CHECK(warmed_at(192, MaskKind::kCausalTopLeft, {128, 112, 12, 2}));
  CHECK(warmed_at(224, MaskKind::kNone, {128, 96, 12, 2}));
  // d=256 on the Hopper family: 128x80 is warmed without a mask only, 128x64 under the causal masks only.
  CHECK(warmed_at(256, MaskKind::kNone, {128, 80, 12, 2}));
  CHECK_FALSE(warmed_at(256, MaskKind::kNone, {128, 64, 12, 2}));
  for (MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
    CHECK(warmed_at(256, mask, {128, 64, 12, 2}));
    CHECK_FALSE(warmed_at(256, mask, {128, 80, 12, 2}));
  }
  // d=64 without a mask: four consumer groups (256x64) up to 1k keys, 192x128 from there and for unknown lengths.
  const auto d64_unmasked = [&](std::int64_t keys) {
    return wgmma->default_config(DType::kBFloat16, 64, MaskKind::kNone, kSmemBytesSm90, keys, "sm_90a");
  };
  for (std::int64_t keys : {1, 512, 1000, 1024}) CHECK(d64_unmasked(keys) == TileConfig{256, 64, 20, 3});
  for (std::int64_t keys : {0, 1025, 2048, 16384}) CHECK(d64_unmasked(keys) == TileConfig{192, 128, 16, 3});
  // Under a causal mask the same split, with two stages.
  for (MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
    const auto d64_causal = [&](std::int64_t keys) {
      return wgmma->default_config(DType::kBFloat16, 64, mask, kSmemBytesSm90, keys, "sm_90a");
    };
    for (std::int64_t keys : {1, 512, 1024}) CHECK(d64_causal(keys) == TileConfig{256, 64, 20, 2});
    for (std::int64_t keys : {0, 1025, 4096}) CHECK(d64_causal(keys) == TileConfig{192, 128, 16, 2});
  }
  for (const KernelSpec& s : defaults) {
    const auto tiles = s.family->default_configs(s.dtype, s.head_dim, s.mask, kSmemBytesSm90, "sm_90a");
    CHECK(std::find(tiles.begin(), tiles.end(), s.tile) != tiles.end());
  }
  // sm_80's defaults fit its smaller shared memory.
  for (const KernelSpec& s : warm_specs("sm_80"))
    CHECK(family_of(s).smem_bytes(s) <= kSmemBytesSm80);

  const DType dtype = DType::kFloat32;  // the SIMT family, with head dims of any multiple of 8
  const auto space = forward_config_space(dtype, 80, kSmemBytesSm80);
  REQUIRE(space.size() >= 2);
  const TileConfig tuned = space.front();
  auto entry = [&](const std::string& arch, const TileConfig& c) {
    return test::make_entry(make_tuning_key("Test GPU", arch, dtype, 80, MaskKind::kCausalTopLeft, 512, 512), c);
  };
  record_tuning_entry(entry("sm_90a", tuned));
  record_tuning_entry(entry("sm_80", space.back()));
  TuningEntry other_compiler = entry("sm_90a", space.back());
  other_compiler.key.gpu_name = "Other";
  other_compiler.key.nvrtc_version = "1.0";
  record_tuning_entry(other_compiler);
  // A tuned tile equal to a default is warmed once.
  record_tuning_entry(test::make_entry(
      make_tuning_key("Test GPU", "sm_90a", DType::kBFloat16, 128, MaskKind::kNone, 4096, 4096),
      default_forward_config(DType::kBFloat16, 128, MaskKind::kNone, kSmemBytesSm90)));

  const auto warmed = warm_specs("sm_90a");
  REQUIRE(warmed.size() == all_defaults.size() + 1);
  const KernelSpec& added = warmed.back();
  CHECK(added.dtype == dtype);
  CHECK(added.head_dim == 80);
  CHECK(added.mask == MaskKind::kCausalTopLeft);
  CHECK(added.tile == tuned);
  CHECK(warm_specs("sm_80").size() == warm_specs("sm_80", false).size() + 1);
  CHECK(warm_specs("sm_90a", false).size() == all_defaults.size());
}

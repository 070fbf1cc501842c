// The backward's kernels as tuning sees them: their candidate tiles come from each family's tile axes and
// rules (tuning_candidates, the forward's machinery), and a tuned entry for the main kernel, read from a
// database file as a new process reads it, is what config resolution (and the launch path's resolution)
// picks for a backward call, while the other kernels and the forward keep theirs.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpu/helpers/log_capture.hpp"
#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/tuning_space.hpp"
#include "tuning/resolution_internal.hpp"
#include "tuning/tuning_db_file.hpp"

using namespace flashrtc;

namespace {

template <typename T>
bool contains(const std::vector<T>& values, const T& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

std::vector<const KernelFamily*> backward_families() {
  std::vector<const KernelFamily*> families;
  for (const KernelFamily* f : kernel_families())
    if (f->operation != Operation::kForward) families.push_back(f);
  return families;
}

BackwardParams backward_call(DType dtype, int head_dim, std::int64_t seqlen) {
  BackwardParams p;
  p.dtype = dtype;
  p.head_dim = head_dim;
  p.seqlen_q = p.seqlen_kv = seqlen;
  return p;
}

}  // namespace

TEST_CASE("the backward families' tuning candidates: their own tiles, every one buildable and resident") {
  REQUIRE(backward_families().size() >= 4);
  for (const KernelFamily* family : backward_families())
    for (const char* arch : {"sm_80", "sm_90a"}) {
      if (!family->arch_mismatch(arch).empty()) continue;  // the Hopper families: sm_90a only
      const SmLimits limits = assumed_sm_limits(arch);
      for (DType dtype : family->dtypes)
        for (int d : {64, 128, 256}) {
          if (!family->serves_head_dim(d)) continue;
          INFO(family->name << " " << to_string(dtype) << " d=" << d << " " << arch);
          const auto full = tuning_candidates(*family, dtype, d, 4096, 4096, TuneSpace::kFull, limits, arch);
          const auto quick =
              tuning_candidates(*family, dtype, d, 4096, 4096, TuneSpace::kQuick, limits, arch);
          REQUIRE_FALSE(quick.empty());
          CHECK(quick.size() <= full.size());
          const auto space = family->config_space(dtype, d, limits.smem_per_block_bytes);
          const auto defaults =
              family->default_configs(dtype, d, MaskKind::kNone, limits.smem_per_block_bytes, arch);
          for (const TileConfig& tile : full) {
            INFO(to_string(tile));
            CHECK(family->check_config(dtype, d, tile, limits.smem_per_block_bytes).empty());
            CHECK((contains(space, tile) || contains(defaults, tile)));
            const KernelSpec spec{dtype, d, MaskKind::kNone, tile, family};
            CHECK(resident_blocks_per_sm(limits, family->threads(spec), 0, family->smem_bytes(spec)) >= 1);
            // The tiles come from the family's own axes, not the forward's.
            CHECK(contains(family->tile_axes.block_m, tile.block_m));
            CHECK(contains(family->tile_axes.warps, tile.warps));
          }
          for (const TileConfig& tile : quick) CHECK(contains(full, tile));
          CHECK(contains(quick, family->default_config(dtype, d, MaskKind::kNone, limits.smem_per_block_bytes,
                                                       4096, arch)));
        }
    }
  // The main kernel on tensor cores sweeps its two stage counts; the row passes have no key tile.
  const KernelFamily& main = portable_family(Operation::kBackward, DType::kBFloat16, 64);
  CHECK(main.name == "bwd-mma");
  const auto tiles = tuning_candidates(main, DType::kBFloat16, 64, 4096, 4096, TuneSpace::kFull,
                                       assumed_sm_limits("sm_90a"));
  CHECK(std::any_of(tiles.begin(), tiles.end(), [](const TileConfig& t) { return t.stages == 1; }));
  CHECK(std::any_of(tiles.begin(), tiles.end(), [](const TileConfig& t) { return t.stages == 2; }));
  for (const TileConfig& t : tuning_candidates(*find_kernel_family("bwd-prep"), DType::kFloat16, 64, 4096,
                                               4096, TuneSpace::kFull, assumed_sm_limits("sm_80")))
    CHECK(t.block_n == 1);
}

TEST_CASE("a tuned backward entry read from the database file is what a backward call resolves to") {
  test::TuningSandbox sandbox("flashrtc-backward-tuned", "warps=8");  // FLASHRTC_CONFIG: the forward's only
  const DeviceTarget target = assumed_device_target("Test GPU 141GB", "sm_90a");
  const BackwardParams call = backward_call(DType::kBFloat16, 64, 3000);
  const KernelFamily& main = *find_kernel_family("bwd-mma");
  const TileConfig fallback =
      main.default_config(DType::kBFloat16, 64, MaskKind::kNone, target.smem_limit_bytes, 3000, "sm_90a");

  ConfigResolution r = resolve_config(config_query(call, Operation::kBackward), target);
  CHECK(r.family == &main);
  CHECK(r.source == ConfigSource::kDefault);
  CHECK(r.config == fallback);
  REQUIRE(r.tuning_key.has_value());
  CHECK(r.tuning_key->family == "bwd-mma");
  CHECK(r.why.find("no tuned entry for Test GPU 141GB sm_90a") != std::string::npos);

  // Another process tuned the backward of Nq, Nk <= 4096: its entry is in the file, under bwd-mma's key.
  const auto candidates = tuning_candidates(main, DType::kBFloat16, 64, 3000, 3000, TuneSpace::kQuick,
                                            assumed_sm_limits("sm_90a"));
  const auto other = std::find_if(candidates.begin(), candidates.end(),
                                  [&](const TileConfig& t) { return !(t == fallback); });
  REQUIRE(other != candidates.end());
  const TileConfig tuned = *other;
  const TuningKey key = make_tuning_key("Test GPU 141GB", "sm_90a", DType::kBFloat16, 64, MaskKind::kNone,
                                        4096, 4096, "bwd-mma");
  record_tuning_entry(test::make_entry(key, tuned));
  detail::forget_loaded_tuning_dbs();  // read back from the file, as a new process does
  REQUIRE(tuning_db_entries().size() == 1);

  r = resolve_config(config_query(call, Operation::kBackward), target);
  CHECK(r.source == ConfigSource::kTuned);
  CHECK(r.config == tuned);
  CHECK(r.why.rfind("tuning database entry for Test GPU 141GB sm_90a", 0) == 0);
  REQUIRE(r.tuned.has_value());
  CHECK(r.tuned->key == key);
  // The launch path resolves the bucketed query through the same code.
  const ConfigResolution launched =
      detail::resolve_call(config_query(call, Operation::kBackward).bucketed(), target);
  CHECK(launched.source == ConfigSource::kTuned);
  CHECK(launched.config == tuned);

  // The pre-pass and the dQ pass have keys of their own; the forward of the same shape too.
  for (Operation op : backward_operations(call, target.arch)) {
    if (op == Operation::kBackward || op == Operation::kBackwardFused) continue;
    const ConfigResolution other_kernel = resolve_config(config_query(call, op), target);
    CHECK(other_kernel.source == ConfigSource::kDefault);
    CHECK(other_kernel.tuning_key->family != "bwd-mma");
  }
  ConfigQuery forward;
  forward.dtype = DType::kBFloat16, forward.head_dim = 64, forward.seqlen_q = forward.seqlen_kv = 3000;
  CHECK(resolve_config(forward, target).source == ConfigSource::kEnvironment);
  CHECK(resolve_config(forward, target).tuning_key->family != "bwd-mma");

  // The call's explicit tile is the main kernel's, and wins over the entry (which config still shows).
  BackwardParams with_tile = call;
  with_tile.config = fallback;
  r = resolve_config(config_query(with_tile, Operation::kBackward), target);
  CHECK(r.source == ConfigSource::kExplicit);
  CHECK(r.config == fallback);
  CHECK(r.tuned.has_value());
  CHECK_FALSE(config_query(with_tile, Operation::kBackwardPrep).explicit_config.has_value());

  // The dQ pass is tuned under its own family's key, and its explicit tile is the call's dq_config.
  const KernelFamily& dq = *find_kernel_family("bwd-dq-mma");
  const TileConfig dq_fallback =
      dq.default_config(DType::kBFloat16, 64, MaskKind::kNone, target.smem_limit_bytes, 3000, "sm_90a");
  const auto dq_space =
      tuning_candidates(dq, DType::kBFloat16, 64, 3000, 3000, TuneSpace::kQuick, assumed_sm_limits("sm_90a"));
  const auto dq_other = std::find_if(dq_space.begin(), dq_space.end(),
                                     [&](const TileConfig& t) { return !(t == dq_fallback); });
  REQUIRE(dq_other != dq_space.end());
  record_tuning_entry(test::make_entry(make_tuning_key("Test GPU 141GB", "sm_90a", DType::kBFloat16, 64,
                                                       MaskKind::kNone, 4096, 4096, "bwd-dq-mma"),
                                       *dq_other));
  detail::forget_loaded_tuning_dbs();
  r = resolve_config(config_query(call, Operation::kBackwardDq), target);
  CHECK(r.family == &dq);
  CHECK(r.source == ConfigSource::kTuned);
  CHECK(r.config == *dq_other);
  CHECK(resolve_config(config_query(call, Operation::kBackward), target).config == tuned);
  BackwardParams with_dq_tile = call;
  with_dq_tile.dq_config = dq_fallback;
  CHECK(config_query(with_dq_tile, Operation::kBackwardDq).explicit_config == dq_fallback);
  CHECK_FALSE(config_query(with_dq_tile, Operation::kBackward).explicit_config.has_value());
  CHECK(resolve_config(config_query(with_dq_tile, Operation::kBackwardDq), target).source ==
        ConfigSource::kExplicit);
  CHECK(explicit_tile(with_dq_tile, Operation::kBackwardDq) == &with_dq_tile.dq_config);
  CHECK(explicit_tile(with_dq_tile, Operation::kBackwardPrep) == nullptr);

  // Another bucket, another GPU: no entry.
  CHECK(resolve_config(config_query(backward_call(DType::kBFloat16, 64, 5000), Operation::kBackward), target)
            .source == ConfigSource::kDefault);
  CHECK(resolve_config(config_query(call, Operation::kBackward), assumed_device_target("Other GPU", "sm_90a"))
            .source == ConfigSource::kDefault);
}

TEST_CASE("a tuned backward entry the family can no longer build is skipped with one warning") {
  test::TuningSandbox sandbox("flashrtc-backward-stale");
  const DeviceTarget target = assumed_device_target("Test GPU 141GB", "sm_90a");
  const BackwardParams call = backward_call(DType::kFloat16, 128, 1024);
  const TuningKey key = make_tuning_key("Test GPU 141GB", "sm_90a", DType::kFloat16, 128, MaskKind::kNone,
                                        1024, 1024, "bwd-mma");
  // As if the family's limits had changed since the tune: a tile its checks now refuse.
  const TileConfig stale{32, 64, 3, 2};
  REQUIRE_FALSE(
      find_kernel_family("bwd-mma")->check_config(DType::kFloat16, 128, stale, kSmemBytesSm90).empty());
  record_tuning_entry(test::make_entry(key, stale));
  detail::forget_loaded_tuning_dbs();
  test::LogCapture log;
  const ConfigResolution r = resolve_config(config_query(call, Operation::kBackward), target);
  CHECK(r.source == ConfigSource::kDefault);
  CHECK(r.why.find("is ignored") != std::string::npos);
  CHECK(resolve_config(config_query(call, Operation::kBackward), target).source == ConfigSource::kDefault);
  const auto warnings = log.warnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings.front().find("bwd-mma") != std::string::npos);
}

TEST_CASE("validate_backward checks the main kernel's and the dQ pass's explicit tiles, naming the field") {
  alignas(16) static const unsigned char placeholder[16] = {};
  BackwardParams p;
  p.dtype = DType::kFloat16;
  p.batch = p.heads_q = p.heads_kv = 1;
  p.seqlen_q = p.seqlen_kv = 64;
  p.head_dim = 64;
  const TensorRef t = TensorRef::bnhd(placeholder, 64, 1, 64);
  p.q = p.k = p.v = p.o = p.d_o = p.d_q = p.d_k = p.d_v = t;
  p.lse = reinterpret_cast<const float*>(placeholder);
  validate_backward(p);
  const TileConfig bad{32, 64, 3, 2};  // no warp count of 3
  p.dq_config = bad;
  try {
    validate_backward(p);
    FAIL("a dQ tile with 3 warps was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.message().rfind("dq_config: ", 0) == 0);
  }
  p.dq_config.reset();
  p.config = bad;
  try {
    validate_backward(p);
    FAIL("a main-kernel tile with 3 warps was accepted");
  } catch (const Error& e) {
    CHECK(e.message().rfind("config: ", 0) == 0);
  }
}

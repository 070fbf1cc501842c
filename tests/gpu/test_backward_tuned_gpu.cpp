// Tuned backward tiles on the GPU: an entry of the tuning database for a backward kernel that takes a tile
// (the fused main kernel, the main kernel, the dQ pass) is what attention_backward launches in the mode that
// runs it, and the gradients it gives match the reference. The second case checks the entries of the
// database in use (tests/gpu/tune_bwd_then_config.sh runs it on what `flashrtc tune --op bwd` wrote, in a
// process of its own; elsewhere it is skipped).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/tuning_space.hpp"
#include "support/backward_case.hpp"

using namespace flashrtc;
using flashrtc::testing::BackwardCase;

namespace {

// The case's call without tensors; its tensors (contiguous or padded views) are all TMA-describable.
BackwardParams call_of(const BackwardCase& c) {
  BackwardParams p;
  p.dtype = c.dtype, p.head_dim = c.head_dim, p.mask = c.mask, p.seqlen_q = c.seqlen_q,
  p.seqlen_kv = c.seqlen_kv, p.deterministic = c.deterministic;
  return p;
}

ConfigQuery kernel_query(const BackwardCase& c, Operation op) {
  ConfigQuery q = config_query(call_of(c), op);
  q.traits = kAllCallTraits;
  return q;
}

// The backward of case c, in the mode that runs op's kernel (the fused one only in non-deterministic calls,
// the separate pass's in every deterministic one), launches it with entry's tile, and its gradients pass the
// reference check.
void check_tuned(BackwardCase c, Operation op, const TuningEntry& entry, const DeviceTarget& target) {
  c.deterministic = op != Operation::kBackwardFused;
  const std::array<Operation, 3> ops = backward_operations(call_of(c), target.arch);
  REQUIRE(std::find(ops.begin(), ops.end(), op) != ops.end());
  const ConfigResolution r = resolve_config(kernel_query(c, op), target);
  INFO(c.describe() << ": " << r.why);
  CHECK(r.source == ConfigSource::kTuned);
  CHECK(r.config == entry.config);
  const auto result = flashrtc::testing::run_backward_case(c);
  INFO(result.report);
  CHECK(result.pass);
}

}  // namespace

TEST_CASE("tuned backward entries are the tiles attention_backward launches, and its gradients match") {
  test::TuningSandbox sandbox("flashrtc-gpu-backward-tuned");
  const DeviceTarget target = *current_device_target();
  for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    BackwardCase c;
    c.dtype = dtype, c.head_dim = 64, c.mask = MaskKind::kCausalTopLeft;
    c.heads_q = c.heads_kv = 2, c.seqlen_q = c.seqlen_kv = 300;
    // A tile other than the default for each kernel that takes one, in both modes (on sm_90a the fused main
    // kernel, and the deterministic mode's main kernel and dQ pass), each under its family's key.
    std::vector<Operation> tuned;
    for (bool deterministic : {false, true}) {
      c.deterministic = deterministic;
      for (Operation op : backward_operations(call_of(c), target.arch))
        if (explicit_tile(BackwardParams{}, op) && std::find(tuned.begin(), tuned.end(), op) == tuned.end())
          tuned.push_back(op);
    }
    c.deterministic = false;
    std::vector<std::string> expected;
    for (Operation op : tuned) {
      const KernelFamily& family = *resolve_config(kernel_query(c, op), target).family;
      const TileConfig fallback = family.default_config(c.dtype, c.head_dim, c.mask, target.smem_limit_bytes,
                                                        c.seqlen_kv, target.arch);
      const auto candidates = tuning_candidates(family, c.dtype, c.head_dim, c.seqlen_q, c.seqlen_kv,
                                                TuneSpace::kQuick, sm_limits(current_device()));
      const auto other = std::find_if(candidates.begin(), candidates.end(),
                                      [&](const TileConfig& t) { return !(t == fallback); });
      REQUIRE(other != candidates.end());
      record_tuning_entry(test::make_entry(make_tuning_key(target.gpu_name, target.arch, c.dtype, c.head_dim,
                                                           c.mask, c.seqlen_q, c.seqlen_kv, family.name),
                                           *other));
      expected.push_back(family.name_expression({c.dtype, c.head_dim, c.mask, *other, &family}));
    }
    for (const TuningEntry& entry : tuning_db_entries())
      if (entry.key.dtype == dtype)
        check_tuned(c, find_kernel_family(entry.key.family)->operation, entry, target);
    // The cache (fresh in the sandbox) holds both kernels with the tuned tiles: the launch compiled them.
    const auto entries = list_cache_entries();
    for (const std::string& name : expected)
      CHECK_MESSAGE(std::any_of(entries.begin(), entries.end(),
                                [&](const CacheEntry& e) { return e.name_expression == name; }),
                    name);
  }
}

// Checks the database that tune_bwd_then_config.sh wrote, run there with --no-skip; a plain run of the suite
// has no such database and reports this case skipped.
TEST_CASE("every backward entry of the tuning database in use for this GPU resolves as tuned and passes" *
          doctest::skip()) {
  const DeviceTarget target = *current_device_target();
  int checked = 0;
  for (const TuningEntry& entry : tuning_db_entries()) {
    const TuningKey& key = entry.key;
    const KernelFamily* family = find_kernel_family(key.family);
    if (!family || !explicit_tile(BackwardParams{}, family->operation) || key.gpu_name != target.gpu_name ||
        key.arch != target.arch || key.nvrtc_version != nvrtc_version())
      continue;  // not a backward kernel a call can be given a tile for (the ones tune --op bwd sweeps)
    BackwardCase c;
    c.dtype = key.dtype, c.head_dim = key.head_dim, c.mask = key.mask, c.heads_q = c.heads_kv = 2;
    // The shortest lengths of the entry's buckets: ragged against the tiles, and cheap for the reference.
    c.seqlen_q = key.seqlen_q_bucket / 2 + 1;
    c.seqlen_kv = key.seqlen_kv_bucket / 2 + 1;
    check_tuned(c, family->operation, entry, target);
    ++checked;
  }
  MESSAGE("checked " << checked << " tuned backward entries of " << tuning_db_path().string());
  CHECK_MESSAGE(checked > 0, "no backward entry for this GPU in " << tuning_db_path().string()
                                                                  << ": tune_bwd_then_config.sh tunes first");
}

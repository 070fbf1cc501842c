// Config resolution: explicit > FLASHRTC_CONFIG > tuning database > default, each source winning over the
// ones below it, and an override that cannot run is an error naming its field, never a fallback.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/attention.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/tuning_db.hpp"
#include "flashrtc/tuning_space.hpp"

using namespace flashrtc;

namespace {

// sm_90 (not sm_90a): the order of sources is tested on the portable family the helpers enumerate; the
// Hopper family's own choice is the last case.
const DeviceTarget kTarget{"Test GPU 80GB", "sm_90", kSmemBytesSm90};

ConfigQuery query(DType dtype = DType::kBFloat16, int head_dim = 128, std::int64_t seqlen = 4096) {
  return {dtype, head_dim, MaskKind::kNone, seqlen, seqlen, std::nullopt};
}

TuningKey key_of(const ConfigQuery& q, const DeviceTarget& t = kTarget) {
  return make_tuning_key(t.gpu_name, t.arch, q.dtype, q.head_dim, q.mask, q.seqlen_q, q.seqlen_kv);
}

// Configurations of the family other than `avoid`, so each source is told apart by its tile.
std::vector<TileConfig> others(const ConfigQuery& q, std::vector<TileConfig> avoid, std::size_t count) {
  std::vector<TileConfig> picked;
  for (const TileConfig& c : forward_config_space(q.dtype, q.head_dim, kSmemBytesSm80))
    if (std::find(avoid.begin(), avoid.end(), c) == avoid.end() && picked.size() < count) {
      picked.push_back(c);
      avoid.push_back(c);
    }
  REQUIRE(picked.size() == count);
  return picked;
}

// A (base, variant, "field=value") triple of the family's space, base not the default: the variant is what
// FLASHRTC_CONFIG="field=value" makes of base.
struct Variant {
  TileConfig base, variant;
  std::string override_text;
};
Variant variant_pair(const ConfigQuery& q, const TileConfig& avoid, std::size_t smem = kSmemBytesSm80) {
  const auto space = forward_config_space(q.dtype, q.head_dim, smem);
  for (const TileConfig& base : space)
    if (!(base == avoid))
      if (const auto variant = test::one_field_variant(space, base))
        return {base, *variant, test::single_field_override(base, *variant)};
  FAIL("no two configurations of the family differ in one field");
  return {};
}

}  // namespace

TEST_CASE("resolution: the default table when nothing else is set") {
  test::TuningSandbox sandbox("flashrtc-resolve-default");
  const ConfigQuery q = query();
  const ConfigResolution r = resolve_config(q, kTarget);
  CHECK(r.source == ConfigSource::kDefault);
  CHECK(r.config == default_forward_config(q.dtype, q.head_dim, q.mask, kTarget.smem_limit_bytes));
  REQUIRE(r.tuning_key.has_value());
  CHECK(*r.tuning_key == key_of(q));
  CHECK_FALSE(r.tuned.has_value());
  CHECK(r.tuning_db == sandbox.db());
  CHECK(r.why.find("no tuned entry") != std::string::npos);
  CHECK(std::string(to_string(r.source)) == "default");
}

TEST_CASE("resolution: each source wins over the ones below it") {
  const ConfigQuery q = query();
  const TileConfig fallback = default_forward_config(q.dtype, q.head_dim, q.mask, kTarget.smem_limit_bytes);
  const Variant pair = variant_pair(q, fallback);
  const TileConfig tuned = pair.base, env_tile = pair.variant;
  const std::string env_text = pair.override_text;
  const TileConfig explicit_tile = others(q, {fallback, tuned, env_tile}, 1)[0];

  SUBCASE("tuned over default") {
    test::TuningSandbox sandbox("flashrtc-resolve-tuned");
    record_tuning_entry(test::make_entry(key_of(q), tuned));
    const ConfigResolution r = resolve_config(q, kTarget);
    CHECK(r.source == ConfigSource::kTuned);
    CHECK(r.config == tuned);
    REQUIRE(r.tuned.has_value());
    CHECK(r.tuned->config == tuned);
    CHECK(r.why.find("tuning database entry") != std::string::npos);
  }
  SUBCASE("environment over tuned: only the fields given replace the tuned tile's") {
    test::TuningSandbox sandbox("flashrtc-resolve-env", env_text);
    record_tuning_entry(test::make_entry(key_of(q), tuned));
    const ConfigResolution r = resolve_config(q, kTarget);
    CHECK(r.source == ConfigSource::kEnvironment);
    CHECK(r.config == env_tile);
    CHECK_FALSE(r.config == tuned);
    CHECK(r.why.find("over the tuned tile") != std::string::npos);
  }
  SUBCASE("environment over default") {
    test::TuningSandbox sandbox("flashrtc-resolve-env-default", "block_m=" + std::to_string(tuned.block_m) +
                                                                    ",block_n=" + std::to_string(tuned.block_n) +
                                                                    ",warps=" + std::to_string(tuned.warps) +
                                                                    ",stages=" + std::to_string(tuned.stages));
    const ConfigResolution r = resolve_config(q, kTarget);
    CHECK(r.source == ConfigSource::kEnvironment);
    CHECK(r.config == tuned);
  }
  SUBCASE("explicit over environment and tuned") {
    test::TuningSandbox sandbox("flashrtc-resolve-explicit", env_text);
    record_tuning_entry(test::make_entry(key_of(q), tuned));
    ConfigQuery with_explicit = q;
    with_explicit.explicit_config = explicit_tile;
    const ConfigResolution r = resolve_config(with_explicit, kTarget);
    CHECK(r.source == ConfigSource::kExplicit);
    CHECK(r.config == explicit_tile);
    // The entry passed over is still reported, for `flashrtc config`.
    REQUIRE(r.tuned.has_value());
    CHECK(r.tuned->config == tuned);
  }
}

TEST_CASE("resolution: a tuned entry applies to its GPU, arch and sequence-length bucket only") {
  test::TuningSandbox sandbox("flashrtc-resolve-keys");
  const ConfigQuery q = query(DType::kFloat16, 64, 4096);
  const TileConfig fallback = default_forward_config(q.dtype, q.head_dim, q.mask, kTarget.smem_limit_bytes);
  const TileConfig tuned = others(q, {fallback}, 1)[0];
  record_tuning_entry(test::make_entry(key_of(q), tuned));

  CHECK(resolve_config(query(DType::kFloat16, 64, 3000), kTarget).source == ConfigSource::kTuned);
  CHECK(resolve_config(query(DType::kFloat16, 64, 4097), kTarget).source == ConfigSource::kDefault);
  CHECK(resolve_config(query(DType::kFloat16, 64, 2048), kTarget).source == ConfigSource::kDefault);
  CHECK(resolve_config(query(DType::kBFloat16, 64, 4096), kTarget).source == ConfigSource::kDefault);
  CHECK(resolve_config(query(DType::kFloat16, 128, 4096), kTarget).source == ConfigSource::kDefault);
  ConfigQuery causal = q;
  causal.mask = MaskKind::kCausalTopLeft;
  CHECK(resolve_config(causal, kTarget).source == ConfigSource::kDefault);
  ConfigQuery other_kv = q;
  other_kv.seqlen_kv = 8192;
  CHECK(resolve_config(other_kv, kTarget).source == ConfigSource::kDefault);

  const DeviceTarget other_gpu{"Another GPU", kTarget.arch, kTarget.smem_limit_bytes};
  CHECK(resolve_config(q, other_gpu).source == ConfigSource::kDefault);
  const DeviceTarget other_arch{kTarget.gpu_name, "sm_100", kTarget.smem_limit_bytes};
  CHECK(resolve_config(q, other_arch).source == ConfigSource::kDefault);

  // Without a device nothing is keyed: no tuned entry can apply.
  const ConfigResolution none = resolve_config(q, no_device_target());
  CHECK(none.source == ConfigSource::kDefault);
  CHECK_FALSE(none.tuning_key.has_value());
  CHECK(none.why.find("no GPU") != std::string::npos);
  CHECK(none.config == default_forward_config(q.dtype, q.head_dim, q.mask, kSmemBytesSm80));
}

TEST_CASE("resolution: an override the kernel cannot build or this GPU cannot fit is an error naming the field") {
  const ConfigQuery q = query(DType::kFloat16, 64);
  SUBCASE("malformed FLASHRTC_CONFIG") {
    test::TuningSandbox sandbox("flashrtc-resolve-bad-env", "block_m=64,wraps=4");
    const Error e = test::expect_error([&] { resolve_config(q, kTarget); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.message().find("FLASHRTC_CONFIG") != std::string::npos);
    CHECK(e.message().find("wraps") != std::string::npos);
  }
  SUBCASE("FLASHRTC_CONFIG with a value the family does not support, field by field") {
    for (const char* field : {"block_m", "block_n", "warps", "stages"}) {
      INFO(field);
      test::TuningSandbox sandbox("flashrtc-resolve-unsupported", std::string(field) + "=7");
      const Error e = test::expect_error([&] { resolve_config(q, kTarget); });
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK(e.message().find("FLASHRTC_CONFIG='" + std::string(field) + "=7'") != std::string::npos);
      // The family's own reason names the field it refuses.
      CHECK(e.message().find(std::string(field), e.message().find("': ")) != std::string::npos);
    }
  }
  SUBCASE("explicit tile the family does not support") {
    test::TuningSandbox sandbox("flashrtc-resolve-bad-explicit");
    ConfigQuery bad = q;
    bad.explicit_config = TileConfig{7, 64, 4, 1};
    const Error e = test::expect_error([&] { resolve_config(bad, kTarget); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.message().rfind("config: ", 0) == 0);
    CHECK(e.message().find("block_m") != std::string::npos);
  }
}

TEST_CASE("resolution: a tile over the target's shared memory is kUnsupported, from the call or the environment") {
  // Some tile of some family fits sm_90's 227 KB but not sm_80's 163 KB.
  std::optional<ConfigQuery> found;
  TileConfig big{};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16})
    for (int head_dim : {256, 128})
      for (const TileConfig& c : forward_config_space(dtype, head_dim, kSmemBytesSm90))
        if (!found && forward_smem_bytes(dtype, head_dim, c) > kSmemBytesSm80) {
          found = query(dtype, head_dim);
          big = c;
        }
  REQUIRE(found.has_value());
  const DeviceTarget sm80{"Test A100", "sm_80", kSmemBytesSm80};
  const std::string text = "block_m=" + std::to_string(big.block_m) + ",block_n=" + std::to_string(big.block_n) +
                           ",warps=" + std::to_string(big.warps) + ",stages=" + std::to_string(big.stages);
  {
    test::TuningSandbox sandbox("flashrtc-resolve-smem-env", text);
    const Error e = test::expect_error([&] { resolve_config(*found, sm80); });
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK(e.message().find("FLASHRTC_CONFIG") != std::string::npos);
    CHECK(e.message().find("shared memory") != std::string::npos);
    // The same override fits the larger GPU.
    CHECK(resolve_config(*found, kTarget).config == big);
  }
  {
    test::TuningSandbox sandbox("flashrtc-resolve-smem-explicit");
    ConfigQuery with_explicit = *found;
    with_explicit.explicit_config = big;
    const Error e = test::expect_error([&] { resolve_config(with_explicit, sm80); });
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK(e.message().find("shared memory") != std::string::npos);
  }
}

TEST_CASE("resolution: a tuned entry that no longer passes the family's checks is skipped for the default") {
  test::TuningSandbox sandbox("flashrtc-resolve-stale-entry");
  const ConfigQuery q = query(DType::kFloat16, 64);
  record_tuning_entry(test::make_entry(key_of(q), TileConfig{7, 64, 4, 1}));
  const ConfigResolution r = resolve_config(q, kTarget);
  CHECK(r.source == ConfigSource::kDefault);
  CHECK(r.config == default_forward_config(q.dtype, q.head_dim, q.mask, kTarget.smem_limit_bytes));
  CHECK_FALSE(r.tuned.has_value());
  CHECK(r.why.find("ignored") != std::string::npos);
}

TEST_CASE("select_forward_spec resolves through FLASHRTC_CONFIG (no GPU: sm_80's shared memory)") {
  alignas(16) static unsigned char placeholder[16];
  ForwardParams p;
  p.dtype = DType::kFloat16;
  p.batch = 1;
  p.seqlen_q = p.seqlen_kv = 128;
  p.heads_q = p.heads_kv = 2;
  p.head_dim = 64;
  p.q = p.k = p.v = p.o = TensorRef::bnhd(placeholder, 128, 2, 64);
  const ConfigQuery q = config_query(p);
  const TileConfig fallback = default_forward_config(q.dtype, q.head_dim, q.mask, kSmemBytesSm80);
  const auto wanted =
      test::one_field_variant(forward_config_space(q.dtype, q.head_dim, kSmemBytesSm80), fallback);
  REQUIRE(wanted.has_value());
  {
    test::TuningSandbox sandbox("flashrtc-resolve-select", test::single_field_override(fallback, *wanted));
    CHECK(select_forward_spec(p).tile == *wanted);
    const ConfigResolution r = resolve_config(p);
    CHECK(r.source == ConfigSource::kEnvironment);
    p.config = fallback;
    CHECK(select_forward_spec(p).tile == fallback);
    CHECK(resolve_config(p).source == ConfigSource::kExplicit);
    p.config.reset();
  }
  {
    test::TuningSandbox sandbox("flashrtc-resolve-select-bad", "warps=3");
    const Error e = test::expect_error([&] { select_forward_spec(p); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.message().find("FLASHRTC_CONFIG") != std::string::npos);
    // attention_forward resolves the same way; without a GPU it fails for the device first or for the tile.
    CHECK(test::expect_error([&] { attention_forward(p); }).code() != ErrorCode::kInternal);
  }
}

TEST_CASE("resolution on sm_90a: the Hopper family, and a tile only another family builds picks that family") {
  test::TuningSandbox sandbox("flashrtc-resolve-hopper");
  const DeviceTarget hopper{"Test GPU 80GB", "sm_90a", kSmemBytesSm90};
  ConfigQuery q = query();
  CHECK(resolve_config(q, hopper).family->name == "wgmma");
  // An mma.sync tile given with the call (4 warps: no warp-specialized layout) runs on mma.
  q.explicit_config = TileConfig{128, 64, 4, 2};
  const ConfigResolution mma = resolve_config(q, hopper);
  CHECK(mma.family->name == "mma");
  CHECK(mma.config == *q.explicit_config);
  REQUIRE(!mma.family_passed_over.empty());
  CHECK(mma.family_passed_over.back().find("wgmma: cannot build the requested tile") != std::string::npos);
  // A Hopper tile stays on wgmma.
  q.explicit_config = TileConfig{128, 128, 12, 2};
  CHECK(resolve_config(q, hopper).family->name == "wgmma");
  // A tile no family builds is refused by the best family's rule.
  q.explicit_config = TileConfig{128, 128, 5, 2};
  CHECK(test::expect_error([&] { resolve_config(q, hopper); }).code() == ErrorCode::kInvalidArgument);
  // Strides no TMA map describes: mma, with the reason.
  q.explicit_config.reset();
  q.traits = 0;
  const ConfigResolution strided = resolve_config(q, hopper);
  CHECK(strided.family->name == "mma");
  CHECK(strided.family_passed_over[0].find("TMA") != std::string::npos);
}

TEST_CASE("resolution on sm_90a: FLASHRTC_CONFIG fields pick the family whose default they complete") {
  test::TuningSandbox sandbox("flashrtc-resolve-hopper-env", "warps=4");
  const DeviceTarget hopper{"Test GPU 80GB", "sm_90a", kSmemBytesSm90};
  const ConfigResolution r = resolve_config(query(), hopper);
  CHECK(r.family->name == "mma");
  CHECK(r.config.warps == 4);
}

TEST_CASE("resolution on sm_90a at d=256: 128x80 without a mask, 128x64 under the causal masks") {
  test::TuningSandbox sandbox("flashrtc-resolve-hopper-masks");
  const DeviceTarget hopper{"Test GPU 141GB", "sm_90a", kSmemBytesSm90};
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    INFO(to_string(dtype));
    ConfigQuery q = query(dtype, 256);
    const ConfigResolution none = resolve_config(q, hopper);
    CHECK(none.family->name == "wgmma");
    CHECK(none.source == ConfigSource::kDefault);
    CHECK(none.config == TileConfig{128, 80, 12, 2});
    CHECK(none.why.rfind("built-in table (row d<=256 for mask none); no tuned entry for", 0) == 0);
    for (MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
      q.mask = mask;
      const ConfigResolution causal = resolve_config(q, hopper);
      CHECK(causal.family->name == "wgmma");
      CHECK(causal.config == TileConfig{128, 64, 12, 2});
      CHECK(causal.why.rfind("built-in table (row d<=256 for mask none passed over); no tuned entry", 0) ==
            0);
    }
  }
  // A head dim below the restricted row's is served by the d<=224 rows: 128x96 at long keys under every mask,
  // from the causal masks' own row under those (128x64 there at 512 keys and fewer), noted as such.
  for (MaskKind mask : kMaskKinds) {
    ConfigQuery q = query(DType::kBFloat16, 224);
    q.mask = mask;
    const ConfigResolution r = resolve_config(q, hopper);
    CHECK(r.config == TileConfig{128, 96, 12, 2});
    const std::string row = mask == MaskKind::kNone ? "(row d<=224 for masks causal, causal-br passed over)"
                                                    : "(row d<=224 for masks causal, causal-br)";
    CHECK(r.why.rfind("built-in table " + row + "; no tuned entry", 0) == 0);
    q.seqlen_q = q.seqlen_kv = 512;
    CHECK(resolve_config(q, hopper).config ==
          (mask == MaskKind::kNone ? TileConfig{128, 96, 12, 2} : TileConfig{128, 64, 12, 2}));
  }
}

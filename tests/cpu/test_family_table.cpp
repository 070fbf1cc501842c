// The family table: the built-in families as data, selection by dtype, head dim and arch with the reasons a
// family is passed over, and a toy family (tests/cpu/data/toy_copy_v.cuh) added through the table alone
// that is then selected, compiled, cached, listed by `cache ls`, swept by the tuner and warmed by
// `compile --all`.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tuning_space.hpp"

using namespace flashrtc;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Rows per warp must divide evenly; the toy's own rule, written once and used by its static_assert's twin.
const char* toy_invalid_reason(const KernelSpec& s) {
  if (s.tile.warps != 1 && s.tile.warps != 2 && s.tile.warps != 4) return "warps: must be 1, 2 or 4";
  if (s.tile.block_m % s.tile.warps != 0) return "block_m: must be a multiple of warps";
  if (s.tile.stages != 1) return "stages: must be 1";
  return nullptr;
}

KernelFamily toy_family() {
  KernelFamily f;
  f.name = "toy-copy-v";
  f.operation = Operation::kForward;
  f.dtypes = {DType::kFloat32};
  f.min_cc = 90;
  f.needs_arch_specific = true;
  f.priority = 100;
  f.max_head_dim = 64;
  f.header = "flashrtc_test/toy_copy_v.cuh";
  f.header_source = test::read_text(std::string(FLASHRTC_SOURCE_DIR) + "/tests/cpu/data/toy_copy_v.cuh");
  f.kernel_template = "flashrtc_test::copy_v";
  f.template_args = {TemplateArg::kElementType, TemplateArg::kHeadDim, TemplateArg::kBlockM, TemplateArg::kWarps};
  f.tile_axes = {{16, 32, 64}, {16}, {1, 2, 4}, {1}};
  f.defaults = {{64, {{{32, 16, 2, 1}}}, "toy"}};
  f.invalid_reason = toy_invalid_reason;
  f.smem_bytes = [](const KernelSpec&) { return std::size_t{0}; };
  f.threads = [](const KernelSpec& s) { return s.tile.warps * 32; };
  f.build_launch = [](const CallPlan& plan, const void*, LaunchShape& shape, KernelArgs&) {
    shape.block[0] = static_cast<unsigned>(plan.threads);
  };
  return f;
}

ConfigQuery fp32_query(int head_dim) { return {DType::kFloat32, head_dim, MaskKind::kNone, 4096, 4096, std::nullopt}; }

}  // namespace

TEST_CASE("the built-in families: fp16/bf16 on tensor cores, fp32 on CUDA cores, selected by the table") {
  const auto families = kernel_families();
  REQUIRE(families.size() >= 2);
  for (const KernelFamily* f : families) {
    INFO(f->name);
    CHECK(find_kernel_family(f->name) == f);
    CHECK(!f->defaults.empty());
    CHECK((f->invalid_reason && f->smem_bytes && f->threads));
    CHECK(static_cast<bool>(f->build_launch));
    // Every default of every family is a tile the family itself accepts on sm_90 (shared memory included).
    for (DType dtype : f->dtypes)
      for (int d : {32, 64, 96, 128, 256})
        if (f->serves_head_dim(d))
          for (MaskKind mask : kMaskKinds) {
            if (!f->serves_mask(mask)) continue;
            for (const TileConfig& tile : f->default_configs(dtype, d, mask, kSmemBytesSm90))
              CHECK_MESSAGE(f->check_config(dtype, d, tile, kSmemBytesSm90).empty(), to_string(tile));
          }
    // The decode attention families run every mask but top-left causal; every other family every mask (the
    // row kernels take none).
    for (MaskKind mask : kMaskKinds)
      CHECK(f->serves_mask(mask) == (f->operation != Operation::kDecode || mask != MaskKind::kCausalTopLeft));
  }
  for (const std::string arch : {"sm_80", "sm_90", "sm_100"}) {
    CHECK(select_kernel_family(Operation::kForward, DType::kBFloat16, 128, arch).family->name == "mma");
    CHECK(select_kernel_family(Operation::kForward, DType::kFloat16, 64, arch).family->name == "mma");
    const FamilyChoice fp32 = select_kernel_family(Operation::kForward, DType::kFloat32, 128, arch);
    CHECK(fp32.family->name == "simt");
    REQUIRE(fp32.passed_over.size() == 2);
    CHECK(contains(fp32.passed_over[0], "wgmma: does not take fp32"));
    CHECK(contains(fp32.passed_over[1], "mma: does not take fp32"));
  }
  // sm_90a: the Hopper family for the head dims it serves and calls whose strides a TMA map describes.
  CHECK(select_kernel_family(Operation::kForward, DType::kBFloat16, 128, "sm_90a").family->name == "wgmma");
  CHECK(select_kernel_family(Operation::kForward, DType::kFloat16, 96, "sm_90a").family->name == "wgmma");
  const FamilyChoice narrow = select_kernel_family(Operation::kForward, DType::kFloat16, 40, "sm_90a");
  CHECK(narrow.family->name == "mma");
  CHECK(contains(narrow.passed_over[0], "wgmma: head_dim=40 is outside its range"));
  const FamilyChoice strided = select_kernel_family(Operation::kForward, DType::kBFloat16, 128, "sm_90a", 0u);
  CHECK(strided.family->name == "mma");
  CHECK(contains(strided.passed_over[0], "wgmma: needs tensors a TMA map can describe"));
  CHECK(contains(select_kernel_family(Operation::kForward, DType::kBFloat16, 128, "sm_90").passed_over[0],
                 "wgmma: needs the arch-specific target sm_90a"));
  // Nothing serves an older GPU: kUnsupported naming each family's reason.
  const Error e = test::expect_error([] { select_kernel_family(Operation::kForward, DType::kBFloat16, 128, "sm_75"); });
  CHECK(e.code() == ErrorCode::kUnsupported);
  CHECK(contains(e.message(), "mma: needs sm_80 or newer, not sm_75"));
}

TEST_CASE("the name expression follows the family's template-argument list") {
  const KernelFamily& mma = portable_family(Operation::kForward, DType::kBFloat16);
  const KernelSpec spec{DType::kBFloat16, 128, MaskKind::kCausalBottomRight, {128, 64, 4, 2}, &mma};
  CHECK(mma.name_expression(spec) ==
        "flashrtc::attention_forward_mma<flashrtc::bfloat16_t, 128, 128, 64, 4, 2, "
        "flashrtc::kernel::Mask::kCausalBottomRight>");
  int values[kMaxTemplateArgs];
  REQUIRE(mma.template_arg_values(spec, values) == 8);  // the last: the variants, none here
  CHECK(values[1] == 128);
  CHECK(values[6] == static_cast<int>(MaskKind::kCausalBottomRight));
  CHECK(values[7] == 0);
  // With variants, the kernel's overload that takes them.
  KernelSpec window = spec;
  window.variants = kVariantWindow;
  CHECK(mma.name_expression(window) ==
        "flashrtc::attention_forward_mma<flashrtc::bfloat16_t, 128, 128, 64, 4, 2, "
        "flashrtc::kernel::Mask::kCausalBottomRight, flashrtc::kernel::Variants(1u)>");
}

TEST_CASE("the Hopper family's grid: persistent under every mask; a rule's key-length bound") {
  const KernelFamily* wgmma = find_kernel_family("wgmma");
  REQUIRE(wgmma);
  for (MaskKind mask : kMaskKinds)
    for (std::int64_t keys : {0, 1, 512, 2048, 2049, 1 << 20}) CHECK(wgmma->runs_persistent(mask, keys));
  // A rule bounded by the key length's bucket; an unknown length is judged long.
  KernelFamily bounded = *wgmma;
  bounded.persistent = {{{MaskKind::kCausalTopLeft}, 2048, "a test rule"}};
  CHECK(bounded.runs_persistent(MaskKind::kCausalTopLeft, 1));
  CHECK(bounded.runs_persistent(MaskKind::kCausalTopLeft, 1500));
  CHECK(bounded.runs_persistent(MaskKind::kCausalTopLeft, 2048));
  CHECK_FALSE(bounded.runs_persistent(MaskKind::kCausalTopLeft, 2049));
  CHECK_FALSE(bounded.runs_persistent(MaskKind::kCausalTopLeft, 0));
  CHECK_FALSE(bounded.runs_persistent(MaskKind::kCausalBottomRight, 512));
  CHECK_FALSE(bounded.runs_persistent(MaskKind::kNone, 512));
  // The choice is a template argument: the two grids are two kernels, cached apart.
  KernelSpec spec{DType::kBFloat16, 128, MaskKind::kCausalTopLeft, {128, 128, 12, 2}, wgmma};
  const std::string one_tile = wgmma->name_expression(spec);
  spec.persistent = true;
  CHECK(wgmma->name_expression(spec) ==
        "flashrtc::attention_forward_wgmma<flashrtc::bfloat16_t, 128, 128, 128, 12, 2, "
        "flashrtc::kernel::Mask::kCausalTopLeft, true>");
  CHECK(one_tile.substr(one_tile.size() - 8) == ", false>");
  // The call's spec carries it, from the key length the call gives.
  ConfigQuery query;
  query.dtype = DType::kBFloat16, query.head_dim = 128, query.mask = MaskKind::kCausalTopLeft;
  ConfigResolution resolution;
  resolution.family = &bounded;
  resolution.config = {128, 128, 12, 2};
  query.seqlen_kv = 1024;
  CHECK(call_kernel_spec(query, resolution).persistent);
  query.seqlen_kv = 8192;
  CHECK_FALSE(call_kernel_spec(query, resolution).persistent);
  // A family whose kernel takes no such argument ignores rules: its grid is fixed by its launch.
  KernelFamily no_argument = *wgmma;
  no_argument.template_args.pop_back();
  CHECK_FALSE(no_argument.runs_persistent(MaskKind::kNone, 512));
  const KernelFamily& mma = portable_family(Operation::kForward, DType::kBFloat16);
  resolution.family = &mma;
  query.seqlen_kv = 1024;
  CHECK_FALSE(call_kernel_spec(query, resolution).persistent);
}

TEST_CASE("a toy family added through the table alone is selected, compiled, cached, listed, tuned and warmed") {
  test::TempDir dir;
  test::ConfigOverride config(test::config_with_cache_dir(dir.path()));
  const std::size_t builtin = kernel_families().size();
  {
    FamilyRegistration registration(toy_family());
    const KernelFamily& toy = registration.family();
    CHECK(kernel_families().size() == builtin + 1);
    CHECK(find_kernel_family("toy-copy-v") == &toy);
    CHECK(test::expect_error([] { FamilyRegistration again(toy_family()); }).code() == ErrorCode::kInvalidArgument);

    // Selection: it outranks simt where its checks pass, and is passed over with its reason elsewhere.
    CHECK(select_kernel_family(Operation::kForward, DType::kFloat32, 64, "sm_90a").family == &toy);
    const FamilyChoice on_sm80 = select_kernel_family(Operation::kForward, DType::kFloat32, 64, "sm_80");
    CHECK(on_sm80.family->name == "simt");
    REQUIRE(!on_sm80.passed_over.empty());
    CHECK(contains(on_sm80.passed_over[0], "toy-copy-v: needs sm_90 or newer, not sm_80"));
    const FamilyChoice wide = select_kernel_family(Operation::kForward, DType::kFloat32, 128, "sm_90a");
    CHECK(wide.family->name == "simt");
    CHECK(contains(wide.passed_over[0], "toy-copy-v: head_dim=128 is outside its range"));
    CHECK(select_kernel_family(Operation::kForward, DType::kBFloat16, 64, "sm_90a").family->name == "wgmma");

    // Config resolution: the family's own default table, and the family named in the tuning key.
    const DeviceTarget h200{"Test GPU", "sm_90a", kSmemBytesSm90};
    const ConfigResolution r = resolve_config(fp32_query(64), h200);
    CHECK(r.family == &toy);
    CHECK(r.config == TileConfig{32, 16, 2, 1});
    REQUIRE(r.tuning_key);
    CHECK(r.tuning_key->family == "toy-copy-v");
    const ConfigResolution a100 = resolve_config(fp32_query(64), {"Test GPU", "sm_80", kSmemBytesSm80});
    CHECK(a100.family->name == "simt");
    // An explicit tile is checked by the family's own rule.
    ConfigQuery bad = fp32_query(64);
    bad.explicit_config = TileConfig{32, 16, 3, 1};
    CHECK(contains(test::expect_error([&] { resolve_config(bad, h200); }).message(), "warps: must be 1, 2 or 4"));

    // Compiled and cached: the name expression has the toy's four template arguments.
    const KernelSpec spec{DType::kFloat32, 64, MaskKind::kNone, {32, 16, 2, 1}, &toy};
    const CompiledKernelInfo first = compile_kernel(spec, "sm_90a");
    CHECK(first.name_expression == "flashrtc_test::copy_v<float, 64, 32, 2>");
    CHECK(first.source == CacheSource::kCompiled);
    CHECK(first.resources.registers > 0);
    CHECK(compile_kernel(spec, "sm_90a").source == CacheSource::kMemory);
    // Without a family named, compile_kernel picks what a call on that arch runs.
    CHECK(compile_kernel({DType::kFloat32, 64, MaskKind::kNone, {32, 16, 2, 1}}, "sm_90a").key == first.key);

    // Listed by `cache ls`, with the family and template arguments it recorded.
    const auto entries = list_cache_entries();
    const auto it = std::find_if(entries.begin(), entries.end(), [&](const CacheEntry& e) { return e.key == first.key; });
    REQUIRE(it != entries.end());
    CHECK(it->problem == "");
    CHECK(it->kernel == "toy-copy-v");
    CHECK(it->dtype == "fp32");
    CHECK(it->head_dim == 64);
    CHECK(it->tile.block_m == 32);
    CHECK(it->tile.warps == 2);

    // Swept by the tuner: the toy's own axes, filtered by its rule.
    const auto candidates = tuning_candidates(toy, DType::kFloat32, 64, 4096, 4096, TuneSpace::kFull,
                                              assumed_sm_limits("sm_90a"));
    CHECK(candidates == toy.config_space(DType::kFloat32, 64, kSmemBytesSm90));
    CHECK(candidates.size() == 9);  // block_m {16, 32, 64} x warps {1, 2, 4}, all dividing
    // Warmed by `compile --all` for the archs it runs on only.
    const auto has_toy = [&](const std::vector<KernelSpec>& specs) {
      return std::any_of(specs.begin(), specs.end(), [&](const KernelSpec& s) { return s.family == &toy; });
    };
    CHECK(has_toy(warm_specs("sm_90a", false)));
    CHECK_FALSE(has_toy(warm_specs("sm_80", false)));
  }
  // Gone from the table with its registration; fp32 is simt's again.
  CHECK(find_kernel_family("toy-copy-v") == nullptr);
  CHECK(kernel_families().size() == builtin);
  CHECK(select_kernel_family(Operation::kForward, DType::kFloat32, 64, "sm_90a").family->name == "simt");
}

TEST_CASE("a default row restricted to masks serves those masks only; the others read the next row") {
  KernelFamily f = toy_family();
  f.defaults = {{64, {{{64, 16, 4, 1}}}, "unmasked only", {MaskKind::kNone}},
                {64, {{{32, 16, 2, 1}}}, "every mask"}};
  CHECK(f.default_config(DType::kFloat32, 64, MaskKind::kNone, kSmemBytesSm90) == TileConfig{64, 16, 4, 1});
  CHECK(f.default_config(DType::kFloat32, 32, MaskKind::kNone, kSmemBytesSm90) == TileConfig{64, 16, 4, 1});
  for (MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
    CHECK(&f.default_row(64, mask) == &f.defaults[1]);
    CHECK(f.default_config(DType::kFloat32, 64, mask, kSmemBytesSm90) == TileConfig{32, 16, 2, 1});
    CHECK(f.default_configs(DType::kFloat32, 64, mask, kSmemBytesSm90) ==
          std::vector<TileConfig>{{32, 16, 2, 1}});
    CHECK(f.default_row_note(64, mask) == "row d<=64 for mask none passed over");
  }
  CHECK(f.default_row_note(64, MaskKind::kNone) == "row d<=64 for mask none");
  CHECK(f.defaults[1].text() == "d<=64");
  f.defaults[0].masks = {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};
  CHECK(f.defaults[0].text() == "d<=64 for masks causal, causal-br");
  CHECK(f.default_config(DType::kFloat32, 64, MaskKind::kNone, kSmemBytesSm90) == TileConfig{32, 16, 2, 1});
  CHECK(f.default_row_note(64, MaskKind::kNone) == "row d<=64 for masks causal, causal-br passed over");
  CHECK(f.default_config(DType::kFloat32, 64, MaskKind::kCausalTopLeft, kSmemBytesSm90) ==
        TileConfig{64, 16, 4, 1});
  CHECK(f.default_row_note(32, MaskKind::kCausalTopLeft) == "row d<=64 for masks causal, causal-br");

  // A mask no row serves: an internal error from the table, and a registration refused.
  f.defaults.pop_back();
  CHECK(test::expect_error([&] {
          f.default_config(DType::kFloat32, 64, MaskKind::kNone, kSmemBytesSm90);
        }).code() == ErrorCode::kInternal);
  const Error e = test::expect_error([&] { FamilyRegistration r(f); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(contains(e.message(), "default tiles for mask none missing"));
  CHECK(find_kernel_family("toy-copy-v") == nullptr);
}

TEST_CASE("a family missing what the runtime needs is refused") {
  KernelFamily f = toy_family();
  f.build_launch = nullptr;
  const Error e = test::expect_error([&] { FamilyRegistration r(f); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(contains(e.message(), "functions missing"));
  CHECK(find_kernel_family("toy-copy-v") == nullptr);
}

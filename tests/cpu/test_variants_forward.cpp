// The dense forward's sliding windows and softcaps (docs/variants.md), without a GPU: resolution runs them on
// the tensor-core family ("mma") wherever it runs, passing over the families that compute neither; ALiBi and
// sinks stay refused; the variants are part of the kernel (name expression, cache key, meta.json's fields),
// not of the tile; and NVRTC builds every default tile of the family with them, for sm_80 and sm_90a,
// without spills. tests/gpu/test_variants_gpu.cpp checks the results against the reference.
#include <doctest/doctest.h>

#include <atomic>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "cpu/helpers/variant_cases.hpp"
#include "families/family_compile.hpp"
#include "flashrtc/attention.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"

using namespace flashrtc;

namespace {

constexpr unsigned kBoth = kVariantWindow | kVariantSoftcap;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

ConfigQuery query(DType dtype, int head_dim, MaskKind mask, unsigned variants) {
  ConfigQuery q;
  q.dtype = dtype;
  q.head_dim = head_dim;
  q.mask = mask;
  q.seqlen_q = 1000;
  q.seqlen_kv = 3000;
  q.variants = variants;
  return q;
}

DeviceTarget target(const char* arch) {
  return {"", arch, std::string(arch) == "sm_80" ? kSmemBytesSm80 : kSmemBytesSm90};
}

// A dense call: B=2, Nq=17, Nk=33, Hq=4, Hkv=2, contiguous [B, N, H, d], fake pointers (never launched).
ForwardParams valid_params(DType dtype, std::int64_t head_dim) {
  ForwardParams p;
  p.dtype = dtype;
  p.batch = 2;
  p.seqlen_q = 17;
  p.seqlen_kv = 33;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = head_dim;
  const auto fake = [](std::uintptr_t address) { return reinterpret_cast<const void*>(address); };
  p.q = TensorRef::bnhd(fake(0x100000), p.seqlen_q, p.heads_q, head_dim);
  p.k = TensorRef::bnhd(fake(0x200000), p.seqlen_kv, p.heads_kv, head_dim);
  p.v = TensorRef::bnhd(fake(0x300000), p.seqlen_kv, p.heads_kv, head_dim);
  p.o = TensorRef::bnhd(fake(0x400000), p.seqlen_q, p.heads_q, head_dim);
  return p;
}

RuntimeConfig memory_only_config() {
  RuntimeConfig config = runtime_config();
  config.disk_cache = false;
  config.always_compile = false;
  config.require_cached = false;
  return config;
}

}  // namespace

TEST_CASE("variant_bits: one bit per variant that is on") {
  AttentionVariants v;
  CHECK(variant_bits(v) == 0u);
  v.window_left = 0;
  CHECK(variant_bits(v) == kVariantWindow);
  v = {};
  v.window_right = 7;
  CHECK(variant_bits(v) == kVariantWindow);
  v.softcap = 30.f;
  CHECK(variant_bits(v) == kBoth);
  v = {};
  v.alibi_slopes = test::fake_floats(0xA00000);
  v.sinks = test::fake_floats(0xB00000);
  CHECK(variant_bits(v) == (kVariantAlibi | kVariantSinks));
  CHECK(variants_text(kBoth | kVariantSinks) == "sliding window, softcap, attention sinks");
}

TEST_CASE(
    "windows and softcaps resolve to the tensor-core forward on sm_80 and sm_90a, its tiles unchanged") {
  for (const char* arch : {"sm_80", "sm_90a"})
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (int head_dim : {64, 128, 256})
        for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight})
          for (unsigned variants : {unsigned(kVariantWindow), unsigned(kVariantSoftcap), kBoth}) {
            INFO(arch << " " << to_string(dtype) << " d=" << head_dim << " " << to_string(mask) << " "
                      << variants_text(variants));
            const ConfigQuery q = query(dtype, head_dim, mask, variants);
            const ConfigResolution r = resolve_config(q, target(arch));
            REQUIRE(r.family != nullptr);
            CHECK(r.family->name == "mma");
            // The tile is the plain call's on that family: variants are not part of the tile.
            CHECK(r.config == r.family->default_config(dtype, head_dim, mask, target(arch).smem_limit_bytes,
                                                       q.seqlen_kv, arch));
            const KernelSpec spec = call_kernel_spec(q, r);
            CHECK(spec.variants == variants);
            CHECK(contains(kernel_name_expression(spec),
                           "flashrtc::kernel::Variants(" + std::to_string(variants) + "u)>"));
            if (std::string(arch) == "sm_90a") {
              // The Hopper forward ranks first and is passed over for the variants it does not compute.
              bool named = false;
              for (const std::string& why : r.family_passed_over) named |= contains(why, "does not compute");
              CHECK(named);
              const ConfigResolution plain = resolve_config(query(dtype, head_dim, mask, 0), target(arch));
              CHECK(plain.family->name != "mma");
            }
          }
}

TEST_CASE("a plain call's kernel takes no variants: its name expression is the kernel's without them") {
  const ConfigQuery q = query(DType::kFloat16, 64, MaskKind::kNone, 0);
  const ConfigResolution r = resolve_config(q, target("sm_80"));
  REQUIRE(r.family->name == "mma");
  const KernelSpec spec = call_kernel_spec(q, r);
  CHECK(spec.variants == 0u);
  CHECK(
      kernel_name_expression(spec) ==
      "flashrtc::attention_forward_mma<flashrtc::half_t, 64, 128, 64, 4, 2, flashrtc::kernel::Mask::kNone>");
  // The varlen family shares the kernel template and computes no variant.
  const KernelFamily* varlen = find_kernel_family("varlen-mma");
  REQUIRE(varlen != nullptr);
  CHECK(varlen->serves_variants == 0u);
  CHECK_FALSE(varlen->takes(TemplateArg::kVariants));
}

TEST_CASE("a tile given with the call or by FLASHRTC_CONFIG applies to a variant call as to a plain one") {
  ConfigQuery q = query(DType::kBFloat16, 128, MaskKind::kCausalBottomRight, kBoth);
  q.explicit_config = TileConfig{64, 64, 4, 2};
  ConfigResolution r = resolve_config(q, target("sm_90a"));
  CHECK(r.family->name == "mma");
  CHECK(r.config == TileConfig{64, 64, 4, 2});
  CHECK(call_kernel_spec(q, r).variants == kBoth);

  RuntimeConfig config = runtime_config();
  config.config_override = "block_n=32";
  test::ConfigOverride env(config);
  q.explicit_config.reset();
  r = resolve_config(q, target("sm_80"));
  CHECK(r.family->name == "mma");
  CHECK(r.source == ConfigSource::kEnvironment);
  CHECK(r.config.block_n == 32);
  CHECK(call_kernel_spec(q, r).variants == kBoth);
}

TEST_CASE("where no family computes a call's variants, the call is refused with kUnsupported naming them") {
  // float32 runs on the SIMT family only, which computes no variant.
  Error e = test::expect_error(
      [] { resolve_config(query(DType::kFloat32, 64, MaskKind::kNone, kVariantWindow), target("sm_80")); });
  CHECK(e.code() == ErrorCode::kUnsupported);
  CHECK(contains(e.what(), "sliding window"));
  e = test::expect_error(
      [] { resolve_config(query(DType::kFloat32, 64, MaskKind::kNone, kVariantSoftcap), target("sm_90a")); });
  CHECK(e.code() == ErrorCode::kUnsupported);
  CHECK(contains(e.what(), "softcap"));
  // ALiBi and sinks: no forward kernel computes them.
  e = test::expect_error(
      [] { resolve_config(query(DType::kFloat16, 64, MaskKind::kNone, kVariantAlibi), target("sm_80")); });
  CHECK(e.code() == ErrorCode::kUnsupported);
  CHECK(contains(e.what(), "ALiBi"));
}

TEST_CASE("the forward's checks let windows and softcaps through to selection, and refuse ALiBi and sinks") {
  ForwardParams p = valid_params(DType::kFloat16, 64);
  p.variants.window_left = 16;
  p.variants.window_right = 0;
  p.variants.softcap = 30.f;
  CHECK_NOTHROW(validate_forward(p));
  const KernelSpec spec = select_forward_spec(p);  // no GPU: resolved as for sm_80
  CHECK(family_of(spec).name == "mma");
  CHECK(spec.variants == kBoth);

  ForwardParams sinks = p;
  sinks.variants.sinks = test::fake_floats(0xB00000);
  Error e = test::expect_error([&] { validate_forward(sinks); });
  CHECK(e.code() == ErrorCode::kUnsupported);
  CHECK(contains(e.what(), "attention sinks"));
  ForwardParams alibi = p;
  alibi.variants.alibi_slopes = test::fake_floats(0xA00000);
  e = test::expect_error([&] { select_forward_spec(alibi); });
  CHECK(e.code() == ErrorCode::kUnsupported);
  CHECK(contains(e.what(), "ALiBi"));

  // float32: the window is named where no family serves it.
  ForwardParams fp32 = valid_params(DType::kFloat32, 64);
  fp32.variants.window_left = 8;
  e = test::expect_error([&] { select_forward_spec(fp32); });
  CHECK(e.code() == ErrorCode::kUnsupported);
  CHECK(contains(e.what(), "sliding window"));

  // The other operations still refuse them: the varlen forward, the backward and the KV cache.
  for (Operation op : {Operation::kForwardVarlen, Operation::kBackward, Operation::kDecode}) {
    INFO(to_string(op));
    unsigned served = 0;
    for (const KernelFamily* f : kernel_families())
      if (f->operation == op) served |= f->serves_variants;
    CHECK(served == 0u);
  }
}

TEST_CASE("variants are part of the kernel: name expression, cache key and meta.json's kernel fields") {
  KernelSpec plain;
  plain.dtype = DType::kBFloat16;
  plain.head_dim = 128;
  plain.mask = MaskKind::kCausalBottomRight;
  plain.tile = {128, 32, 4, 2};
  plain.family = find_kernel_family("mma");
  REQUIRE(plain.family != nullptr);
  std::set<std::string> names, keys;
  for (unsigned variants : {0u, unsigned(kVariantWindow), unsigned(kVariantSoftcap), kBoth}) {
    KernelSpec spec = plain;
    spec.variants = variants;
    const detail::CompileRequest request = detail::family_compile_request(spec, "sm_80");
    names.insert(request.inputs.name_expression);
    keys.insert(request.inputs.key());
    CHECK(request.description["variants"] == (variants ? variants_text(variants) : std::string("none")));
  }
  CHECK(names.size() == 4);
  CHECK(keys.size() == 4);
}

TEST_CASE(
    "every default tile of the tensor-core forward compiles with windows and softcaps, without spills") {
  test::ConfigOverride config(memory_only_config());
  struct Job {
    KernelSpec spec;
    std::string arch;
    std::optional<CompiledKernelInfo> info;
    std::string error;
  };
  const KernelFamily* mma = find_kernel_family("mma");
  REQUIRE(mma != nullptr);
  // Both variants at once (the most registers) for every default tile; each alone on one tile.
  std::vector<Job> jobs;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (int head_dim : {32, 64, 96, 128, 256})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight})
        for (const TileConfig& tile :
             mma->default_configs(DType::kBFloat16, head_dim, mask, target(arch).smem_limit_bytes, arch)) {
          KernelSpec spec{DType::kBFloat16, head_dim, mask, tile, mma};
          spec.variants = kBoth;
          jobs.push_back({spec, arch, std::nullopt, {}});
        }
    for (unsigned variants : {unsigned(kVariantWindow), unsigned(kVariantSoftcap)}) {
      KernelSpec spec{DType::kFloat16, 128, MaskKind::kNone, {128, 32, 4, 2}, mma};
      spec.variants = variants;
      jobs.push_back({spec, arch, std::nullopt, {}});
    }
  }
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
  for (const Job& job : jobs) {
    INFO(kernel_name_expression(job.spec) << " " << job.arch);
    CHECK(job.error == "");
    if (!job.info) continue;
    INFO("registers=" << job.info->resources.registers);
    CHECK(job.info->name_expression == kernel_name_expression(job.spec));
    CHECK(job.info->resources.registers <= 255);
    CHECK(job.info->resources.spill_store_bytes == 0);
    CHECK(job.info->resources.spill_load_bytes == 0);
  }
}

TEST_CASE("compile_kernel builds variants only on a family that computes them") {
  test::ConfigOverride config(memory_only_config());
  // No family named: the best family for sm_90a that computes them (the Hopper family does not).
  KernelSpec spec{DType::kBFloat16, 64, MaskKind::kCausalTopLeft, {128, 64, 4, 2}};
  spec.variants = kBoth;
  const CompiledKernelInfo info = compile_kernel(spec, "sm_90a");
  CHECK(contains(info.name_expression, "attention_forward_mma<"));
  CHECK(contains(info.name_expression, "flashrtc::kernel::Variants(3u)>"));
  // A family that does not compute them is refused, never compiled without them.
  const KernelFamily* wgmma = find_kernel_family("wgmma");
  REQUIRE(wgmma != nullptr);
  spec.family = wgmma;
  spec.tile =
      wgmma->default_config(DType::kBFloat16, 64, MaskKind::kCausalTopLeft, kSmemBytesSm90, 0, "sm_90a");
  const Error e = test::expect_error([&] { compile_kernel(spec, "sm_90a"); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(contains(e.what(), "wgmma family does not compute sliding window, softcap"));
}

TEST_CASE("attention_flops counts the pairs a window leaves visible, and is unchanged without one") {
  ForwardParams p;
  p.batch = 2;
  p.heads_q = 3;
  p.head_dim = 64;
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight})
    for (std::int64_t nq : {1, 7, 40})
      for (std::int64_t nk : {1, 9, 40})
        for (std::int64_t left : {-1, 0, 3, 100})
          for (std::int64_t right : {-1, 0, 5}) {
            INFO(to_string(mask) << " " << nq << "x" << nk << " window (" << left << "," << right << ")");
            p.mask = mask;
            p.seqlen_q = nq;
            p.seqlen_kv = nk;
            p.variants.window_left = left;
            p.variants.window_right = right;
            if (left == -1 && right == -1) {
              const double full = 4.0 * 2 * 3 * nq * nk * 64;
              CHECK(attention_flops(p) == (mask == MaskKind::kNone ? full : full / 2));
              continue;
            }
            double pairs = 0;
            for (std::int64_t i = 0; i < nq; ++i)
              for (std::int64_t j = 0; j < nk; ++j) pairs += mask_allows(mask, i, j, nq, nk, left, right);
            CHECK(attention_flops(p) == 4.0 * 2 * 3 * 64 * pairs);
          }
}

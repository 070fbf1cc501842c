// The variable-length forward's C++ API without a device: every argument rule throws kInvalidArgument naming
// the argument before anything touches a device, dtypes no family serves are kUnsupported, the call resolves
// to its dtype's varlen family from its host bounds (varlen-wgmma on sm_90a where a TMA map describes the
// tensors, else varlen-mma, for fp16 and bf16; varlen-simt for fp32), and the kernel parameters index the
// packed tensors per sequence. Pointers are fake (never dereferenced without a device).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "cpu/helpers/variant_cases.hpp"
#include "families/forward_launch.hpp"
#include "flashrtc/attention.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tuning_space.hpp"

using namespace flashrtc;

namespace {

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

template <typename T = void>
T* fake(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// A valid call: 3 sequences, 40 packed queries, 50 packed keys, Hq=4, Hkv=2 (GQA), contiguous [total, H, d].
VarlenForwardParams valid_params(DType dtype = DType::kFloat16, std::int64_t head_dim = 64) {
  VarlenForwardParams p;
  p.dtype = dtype;
  p.batch = 3;
  p.total_q = 40;
  p.total_k = 50;
  p.max_seqlen_q = 20;
  p.max_seqlen_k = 30;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = head_dim;
  p.q = TensorRef::bnhd(fake(0x100000), p.total_q, p.heads_q, head_dim);
  p.k = TensorRef::bnhd(fake(0x200000), p.total_k, p.heads_kv, head_dim);
  p.v = TensorRef::bnhd(fake(0x300000), p.total_k, p.heads_kv, head_dim);
  p.o = TensorRef::bnhd(fake(0x400000), p.total_q, p.heads_q, head_dim);
  p.cu_seqlens_q = fake<const std::int32_t>(0x500000);
  p.cu_seqlens_k = fake<const std::int32_t>(0x500100);
  p.lse = fake<float>(0x600000);
  return p;
}

struct InvalidCase {
  std::string what;
  std::function<void(VarlenForwardParams&)> mutate;
  std::vector<std::string> names;  // substrings the message must contain
};

std::vector<InvalidCase> invalid_cases() {
  std::vector<InvalidCase> cases;
  auto add = [&](std::string what, std::function<void(VarlenForwardParams&)> mutate,
                 std::vector<std::string> names) {
    cases.push_back({std::move(what), std::move(mutate), std::move(names)});
  };
  // Device arrays: only their pointers can be checked on the host.
  add("null cu_seqlens_q", [](VarlenForwardParams& p) { p.cu_seqlens_q = nullptr; },
      {"cu_seqlens_q", "null"});
  add("null cu_seqlens_k", [](VarlenForwardParams& p) { p.cu_seqlens_k = nullptr; },
      {"cu_seqlens_k", "null"});
  add("cu_seqlens_q 2-byte aligned",
      [](VarlenForwardParams& p) { p.cu_seqlens_q = fake<const std::int32_t>(0x500002); },
      {"cu_seqlens_q", "aligned"});
  add("cu_seqlens_k 1-byte aligned",
      [](VarlenForwardParams& p) { p.cu_seqlens_k = fake<const std::int32_t>(0x500101); },
      {"cu_seqlens_k", "aligned"});
  add("seqused_k 2-byte aligned",
      [](VarlenForwardParams& p) { p.seqused_k = fake<const std::int32_t>(0x500202); },
      {"seqused_k", "aligned"});
  add("lse 2-byte aligned", [](VarlenForwardParams& p) { p.lse = fake<float>(0x600002); },
      {"lse", "aligned"});
  // Tensors.
  add("null q", [](VarlenForwardParams& p) { p.q.data = nullptr; }, {"q.data", "null"});
  add("null k", [](VarlenForwardParams& p) { p.k.data = nullptr; }, {"k.data", "null"});
  add("null v", [](VarlenForwardParams& p) { p.v.data = nullptr; }, {"v.data", "null"});
  add("null o", [](VarlenForwardParams& p) { p.o.data = nullptr; }, {"o.data", "null"});
  add("q 8-byte aligned", [](VarlenForwardParams& p) { p.q.data = fake(0x100008); }, {"q.data", "aligned"});
  add("o stride_dim 2", [](VarlenForwardParams& p) { p.o.stride_dim = 2; }, {"o.stride_dim"});
  add("negative k stride_seq", [](VarlenForwardParams& p) { p.k.stride_seq = -p.k.stride_seq; },
      {"k.stride_seq", ">= 0"});
  add("fp16 v stride_head 4 (8 bytes)", [](VarlenForwardParams& p) { p.v.stride_head = 4; },
      {"v.stride_head", "16 bytes"});
  add("q stride_seq near INT64_MAX",
      [](VarlenForwardParams& p) { p.q.stride_seq = std::numeric_limits<std::int64_t>::max() / 8 * 8; },
      {"q", "overflow"});
  // Enums.
  add("dtype 3", [](VarlenForwardParams& p) { p.dtype = static_cast<DType>(3); }, {"dtype"});
  add("mask 3", [](VarlenForwardParams& p) { p.mask = static_cast<MaskKind>(3); }, {"mask"});
  // Sizes and bounds.
  add("batch 0", [](VarlenForwardParams& p) { p.batch = 0; }, {"batch"});
  add("batch 2^31 - 1 (B + 1 entries past int32 indices)",
      [](VarlenForwardParams& p) { p.batch = kInt32Max; }, {"batch", "overflow"});
  add("total_q 0", [](VarlenForwardParams& p) { p.total_q = 0; }, {"total_q"});
  add("total_q 2^31", [](VarlenForwardParams& p) { p.total_q = kInt32Max + 1; }, {"total_q", "int32"});
  add("total_k -1", [](VarlenForwardParams& p) { p.total_k = -1; }, {"total_k"});
  add("total_k 2^31", [](VarlenForwardParams& p) { p.total_k = kInt32Max + 1; }, {"total_k", "int32"});
  add("max_seqlen_q 0", [](VarlenForwardParams& p) { p.max_seqlen_q = 0; }, {"max_seqlen_q", ">= 1"});
  add("max_seqlen_q past total_q", [](VarlenForwardParams& p) { p.max_seqlen_q = p.total_q + 1; },
      {"max_seqlen_q", "total_q"});
  add("max_seqlen_k -1", [](VarlenForwardParams& p) { p.max_seqlen_k = -1; }, {"max_seqlen_k"});
  add("max_seqlen_k past total_k", [](VarlenForwardParams& p) { p.max_seqlen_k = p.total_k + 1; },
      {"max_seqlen_k", "total_k"});
  add("heads_q 0", [](VarlenForwardParams& p) { p.heads_q = 0; }, {"heads_q"});
  add("heads_kv -2", [](VarlenForwardParams& p) { p.heads_kv = -2; }, {"heads_kv"});
  add("heads_q 6 with heads_kv 4", [](VarlenForwardParams& p) { p.heads_q = 6, p.heads_kv = 4; },
      {"heads_q", "heads_kv"});
  add("head_dim 12", [](VarlenForwardParams& p) { p.head_dim = 12; }, {"head_dim"});
  add("head_dim -64", [](VarlenForwardParams& p) { p.head_dim = -64; }, {"head_dim"});
  add("head_dim 264", [](VarlenForwardParams& p) { p.head_dim = 264; }, {"head_dim"});
  add("softmax_scale NaN",
      [](VarlenForwardParams& p) { p.softmax_scale = std::numeric_limits<float>::quiet_NaN(); },
      {"softmax_scale"});
  add("config block_n 12",
      [](VarlenForwardParams& p) {
        p.config = TileConfig{64, 12, 4, 1};
      },
      {"config", "block_n"});
  return cases;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("validate_varlen_forward accepts valid calls") {
  CHECK_NOTHROW(validate_varlen_forward(valid_params()));
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    for (std::int64_t head_dim : {8, 32, 64, 96, 128, 256})
      for (MaskKind mask : kMaskKinds) {
        INFO(to_string(dtype) << " d=" << head_dim << " " << to_string(mask));
        VarlenForwardParams p = valid_params(dtype, head_dim);
        p.mask = mask;
        CHECK_NOTHROW(validate_varlen_forward(p));
      }
  VarlenForwardParams p = valid_params();
  SUBCASE("optional fields, edge bounds and an unused stride_batch") {
    p.lse = nullptr;
    p.seqused_k = fake<const std::int32_t>(0x500200);
    p.softmax_scale = -0.5f;
    p.max_seqlen_q = p.total_q;
    p.max_seqlen_k = 0;     // no sequence has keys
    p.q.stride_batch = -3;  // a packed tensor is one batch: the field is not read
    CHECK_NOTHROW(validate_varlen_forward(p));
    p.total_k = 0;  // no keys at all
    CHECK_NOTHROW(validate_varlen_forward(p));
  }
  SUBCASE("the largest sizes the kernels index with 32 bits") {
    p.batch = kInt32Max - 1;
    p.total_q = p.total_k = p.max_seqlen_q = p.max_seqlen_k = kInt32Max;
    for (TensorRef* t : {&p.q, &p.k, &p.v, &p.o}) t->stride_seq = t->stride_head = 0;
    CHECK_NOTHROW(validate_varlen_forward(p));
  }
}

TEST_CASE("validate_varlen_forward: each invalid argument throws kInvalidArgument naming it") {
  const auto cases = invalid_cases();
  REQUIRE(cases.size() > 30);
  for (const InvalidCase& c : cases) {
    INFO(c.what);
    VarlenForwardParams p = valid_params();
    c.mutate(p);
    const Error e = test::expect_error([&] { validate_varlen_forward(p); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    INFO("message: " << e.message());
    for (const std::string& name : c.names) CHECK(contains(e.message(), name));
    // The call checks the same arguments before it needs a device, so nothing is launched; its tile is
    // checked once the call resolves, and resolve_config validates first.
    if (c.what.rfind("config", 0) != 0) {
      const Error launch = test::expect_error([&] { attention_varlen_forward(p); });
      CHECK(launch.code() == ErrorCode::kInvalidArgument);
      for (const std::string& name : c.names) CHECK(contains(launch.message(), name));
    }
    CHECK(test::expect_error([&] { resolve_config(p); }).code() == ErrorCode::kInvalidArgument);
  }
}

TEST_CASE("validate_varlen_forward: fp32 takes fp32 strides and tiles") {
  VarlenForwardParams p = valid_params(DType::kFloat32);
  CHECK_NOTHROW(validate_varlen_forward(p));
  p.v.stride_head = 2;  // 8 bytes: the tensors' 16-byte rule counts fp32's 4 bytes
  const Error e = test::expect_error([&] { validate_varlen_forward(p); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(contains(e.message(), "v.stride_head"));
  p = valid_params(DType::kFloat32);
  p.config = TileConfig{64, 64, 4, 1};  // a simt tile
  CHECK_NOTHROW(validate_varlen_forward(p));
  p.config = TileConfig{64, 24, 4, 1};  // block_n not a multiple of d=64's 16 threads per row (simt's rule)
  const Error tile = test::expect_error([&] { validate_varlen_forward(p); });
  CHECK(tile.code() == ErrorCode::kInvalidArgument);
  CHECK(contains(tile.message(), "block_n"));
}

TEST_CASE("attention_varlen_forward with valid arguments and no GPU throws kNoDevice") {
  if (device_available()) {
    MESSAGE(
        "a device is present; the no-device path is not testable here (fake pointers are never launched)");
    return;
  }
  CHECK(test::expect_error([&] { attention_varlen_forward(valid_params()); }).code() == ErrorCode::kNoDevice);
}

TEST_CASE("a varlen call resolves to the varlen family from its host bounds") {
  VarlenForwardParams p = valid_params(DType::kBFloat16, 128);
  p.mask = MaskKind::kCausalBottomRight;
  const ConfigQuery q = config_query(p);
  CHECK(q.operation == Operation::kForwardVarlen);
  CHECK(q.seqlen_q == p.max_seqlen_q);
  CHECK(q.seqlen_kv == p.max_seqlen_k);
  CHECK(q.mask == p.mask);
  CHECK(q.traits == kAllCallTraits);
  const auto tile_args = [](const KernelSpec& spec) {
    return std::to_string(spec.tile.block_m) + ", " + std::to_string(spec.tile.block_n) + ", " +
           std::to_string(spec.tile.warps) + ", " + std::to_string(spec.tile.stages);
  };
  for (const char* arch : {"sm_80", "sm_90a", "sm_100", "sm_120"}) {
    INFO(std::string(arch));
    const DeviceTarget target = assumed_device_target("", arch);
    const ConfigResolution r = resolve_config(q, target);
    REQUIRE(r.family != nullptr);
    const KernelSpec spec = call_kernel_spec(q, r);
    // The dense kernel template's variable-length instantiation; the dense family's name expression has no
    // such argument (the template's default, false). sm_90a takes the Hopper template, on one block per tile.
    if (std::string(arch) == "sm_90a") {
      CHECK(r.family->name == "varlen-wgmma");
      CHECK_FALSE(spec.persistent);
      CHECK(r.family->name_expression(spec) ==
            "flashrtc::attention_forward_wgmma<flashrtc::bfloat16_t, 128, " + tile_args(spec) +
                ", flashrtc::kernel::Mask::kCausalBottomRight, false, true>");
      // The dense family's tiles and defaults.
      CHECK(r.config == find_kernel_family("wgmma")->default_config(
                            DType::kBFloat16, 128, p.mask, target.smem_limit_bytes, p.max_seqlen_k, arch));
      continue;
    }
    CHECK(r.family->name == "varlen-mma");
    CHECK(r.family->name_expression(spec) == "flashrtc::attention_forward_mma<flashrtc::bfloat16_t, 128, " +
                                                 tile_args(spec) +
                                                 ", flashrtc::kernel::Mask::kCausalBottomRight, true>");
    const KernelFamily& dense = *find_kernel_family("mma");
    const std::string dense_name = dense.name_expression(spec);
    const std::string dense_end = "Mask::kCausalBottomRight>";
    CHECK(dense_name.compare(dense_name.size() - dense_end.size(), dense_end.size(), dense_end) == 0);
  }
  // No key in any sequence still resolves (the bucket of one key).
  p.max_seqlen_k = 0;
  CHECK_NOTHROW(resolve_config(p));
}

TEST_CASE("an fp32 varlen call resolves to varlen-simt, the simt kernel's variable-length instantiation") {
  const KernelFamily& dense = *find_kernel_family("simt");
  for (std::int64_t head_dim : {32, 64, 128, 256})
    for (MaskKind mask : kMaskKinds) {
      VarlenForwardParams p = valid_params(DType::kFloat32, head_dim);
      p.mask = mask;
      const ConfigQuery q = config_query(p);
      for (const char* arch : {"sm_80", "sm_90a", "sm_100", "sm_120"}) {
        INFO(std::string(arch) << " d=" << head_dim << " " << to_string(mask));
        DeviceTarget target = no_device_target();
        target.arch = arch;
        const ConfigResolution r = resolve_config(q, target);
        REQUIRE(r.family != nullptr);
        CHECK(r.family->name == "varlen-simt");
        const KernelSpec spec = call_kernel_spec(q, r);
        // The dense call of the same lengths runs simt on the same tile: the varlen family shares its
        // defaults.
        ConfigQuery dense_query = q;
        dense_query.operation = Operation::kForward;
        const ConfigResolution dense_r = resolve_config(dense_query, target);
        REQUIRE(dense_r.family == &dense);
        CHECK(spec.tile == call_kernel_spec(dense_query, dense_r).tile);
        const std::string name = r.family->name_expression(spec);
        const std::string dense_name = dense.name_expression(spec);
        // The same template, with the variable-length switch on; the dense name leaves it at its default.
        CHECK(name == dense_name.substr(0, dense_name.size() - 1) + ", true>");
        CHECK(name.rfind("flashrtc::attention_forward_simt<float, " + std::to_string(head_dim) + ", ", 0) ==
              0);
      }
    }
}

TEST_CASE("varlen-simt compiles for sm_80 and sm_90a without spills, within the register margin") {
  // A sample of the defaults (tests/cpu/test_default_margin.cpp compiles every one for every arch): the
  // largest head dim (the most accumulators) and the smallest, under the bottom-right mask.
  RuntimeConfig config = runtime_config();
  config.disk_cache = false;  // compiled by this build's NVRTC, not read from an older entry
  config.always_compile = false;
  config.require_cached = false;
  test::ConfigOverride scoped(config);
  const KernelFamily& family = *find_kernel_family("varlen-simt");
  for (const char* arch : {"sm_80", "sm_90a"})
    for (int head_dim : {32, 256}) {
      const KernelSpec spec{DType::kFloat32, head_dim, MaskKind::kCausalBottomRight,
                            family.default_config(DType::kFloat32, head_dim, MaskKind::kCausalBottomRight,
                                                  assumed_sm_limits(arch).smem_per_block_bytes, 0, arch),
                            &family};
      INFO(arch << " d=" << head_dim << " " << to_string(spec.tile));
      const ResourceReport r = compile_kernel(spec, arch).resources;
      INFO("registers=" << r.registers << " spill stores=" << r.spill_store_bytes
                        << " spill loads=" << r.spill_load_bytes);
      CHECK(r.registers > 0);
      CHECK(r.registers <= kDefaultMaxRegisters);
      CHECK(r.spill_store_bytes == 0);
      CHECK(r.spill_load_bytes == 0);
    }
}

TEST_CASE("on sm_90a, varlen calls the Hopper family cannot take run on varlen-mma") {
  const DeviceTarget target = assumed_device_target("", "sm_90a");
  const auto family_of = [&](const VarlenForwardParams& p) {
    return resolve_config(config_query(p), target).family->name;
  };
  for (MaskKind mask : kMaskKinds)
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (std::int64_t d : {32, 64, 96, 128, 160, 192, 224, 256}) {
        INFO(to_string(mask) << " " << to_string(dtype) << " d=" << d);
        VarlenForwardParams p = valid_params(dtype, d);
        p.mask = mask;
        CHECK(family_of(p) == (d >= 64 && d % 32 == 0 ? "varlen-wgmma" : "varlen-mma"));
      }
  // A zero head stride over more than one head (K and V broadcast) is no TMA map.
  VarlenForwardParams p = valid_params(DType::kFloat16, 128);
  p.k.stride_head = 0;
  CHECK(config_query(p).traits == 0u);
  CHECK(family_of(p) == "varlen-mma");
  // One head: its stride is never followed.
  p.heads_q = p.heads_kv = 1;
  CHECK(config_query(p).traits == kAllCallTraits);
  CHECK(family_of(p) == "varlen-wgmma");
}

TEST_CASE("the Hopper varlen family: the dense family's tiles and defaults, no persistent grid") {
  const KernelFamily& dense = *find_kernel_family("wgmma");
  const KernelFamily* varlen = find_kernel_family("varlen-wgmma");
  REQUIRE(varlen != nullptr);
  CHECK(varlen->operation == Operation::kForwardVarlen);
  CHECK(varlen->needs_arch_specific);
  CHECK(varlen->header == dense.header);
  CHECK(varlen->kernel_template == dense.kernel_template);
  CHECK(varlen->takes(TemplateArg::kVarlen));
  CHECK(varlen->persistent.empty());
  for (MaskKind mask : kMaskKinds)
    for (std::int64_t keys : {0, 512, 4096, 16384}) {
      CHECK_FALSE(varlen->runs_persistent(mask, keys));
      for (int d : {64, 96, 128, 192, 256})
        CHECK(varlen->default_config(DType::kFloat16, d, mask, kSmemBytesSm90, keys, "sm_90a") ==
              dense.default_config(DType::kFloat16, d, mask, kSmemBytesSm90, keys, "sm_90a"));
    }
}

TEST_CASE(
    "varlen kernel parameters: one block per (sequence, head, query block of max_seqlen_q), batch strides "
    "0") {
  VarlenForwardParams p = valid_params(DType::kFloat16, 64);
  p.seqused_k = fake<const std::int32_t>(0x500200);
  p.q.stride_batch = 12345 * 8;  // not used: the kernel moves each block to its sequence's first row
  p.softmax_scale = 0.5f;
  CallPlan plan;
  plan.family = find_kernel_family("varlen-mma");
  plan.spec.tile = TileConfig{16, 64, 1, 2};
  plan.threads = 32;
  const kernel::VarlenForwardParams k = detail::varlen_forward_kernel_params(plan, p);
  CHECK(k.dense.num_m_blocks == 2);  // ceil(20 / 16)
  CHECK(k.dense.num_blocks == 3 * 4 * 2);
  CHECK(k.dense.seqlen_q == 20);
  CHECK(k.dense.seqlen_kv == 30);
  CHECK(k.dense.q_stride_batch == 0);
  CHECK(k.dense.k_stride_batch == 0);
  CHECK(k.dense.v_stride_batch == 0);
  CHECK(k.dense.o_stride_batch == 0);
  CHECK(k.dense.q_stride_seq == 4 * 64);
  CHECK(k.dense.k_stride_head == 64);
  CHECK(k.dense.kv_group == 2);
  CHECK(k.dense.lse == p.lse);
  CHECK(k.dense.scale_log2 == doctest::Approx(0.5 * 1.4426950408889634));
  CHECK(k.cu_seqlens_q == p.cu_seqlens_q);
  CHECK(k.cu_seqlens_k == p.cu_seqlens_k);
  CHECK(k.seqused_k == p.seqused_k);
  CHECK(k.total_q == 40);
  CHECK(k.total_k == 50);
  LaunchShape shape;
  KernelArgs args;
  plan.family->build_launch(plan, &p, shape, args);
  CHECK(shape.grid[0] == 24u);
  CHECK(shape.block[0] == 32u);
  // varlen-simt launches the same grid over the same parameters.
  CallPlan simt = plan;
  simt.family = find_kernel_family("varlen-simt");
  REQUIRE(simt.family != nullptr);
  LaunchShape simt_shape;
  KernelArgs simt_args;
  simt.family->build_launch(simt, &p, simt_shape, simt_args);
  CHECK(simt_shape.grid[0] == 24u);
  CHECK(simt_shape.block[0] == 32u);

  // The grid's index limit, as the dense forward's.
  p.batch = 1 << 20;
  p.heads_q = 1 << 12;
  p.heads_kv = 1;
  p.max_seqlen_q = p.total_q = 1 << 10;
  CHECK(test::expect_error([&] { detail::varlen_forward_kernel_params(plan, p); }).code() ==
        ErrorCode::kInvalidArgument);
}

TEST_CASE("varlen forward variants: invalid values throw kInvalidArgument, valid ones kUnsupported") {
  test::check_variant_cases(valid_params(), [](const VarlenForwardParams& p) { validate_varlen_forward(p); });
  test::check_variant_cases(valid_params(), [](const VarlenForwardParams& p) { resolve_config(p); });
  test::check_variant_cases(valid_params(),
                            [](const VarlenForwardParams& p) { attention_varlen_forward(p); });
}

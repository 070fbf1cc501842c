// The variable-length backward's C++ API without a device: every argument rule throws kInvalidArgument naming
// the argument before anything touches a device, fp32 (no portable backward family) is kUnsupported, the
// call's three kernels resolve to the pre-pass and the varlen families from the host bounds (the Hopper pair
// on sm_90a where it serves the call), and the launches index the packed tensors per sequence; a compile
// sample of the Hopper pair. Pointers are fake (never dereferenced without a device).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "cpu/helpers/variant_cases.hpp"
#include "families/backward_launch.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/backward_params.cuh"
#include "flashrtc/device.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"

using namespace flashrtc;

namespace {

template <typename T = void>
T* fake(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// A valid call: 3 sequences, 40 packed queries, 50 packed keys, Hq=4, Hkv=2 (GQA), contiguous [total, H, d].
VarlenBackwardParams valid_params(DType dtype = DType::kFloat16, std::int64_t head_dim = 64) {
  VarlenBackwardParams p;
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
  p.d_o = TensorRef::bnhd(fake(0x700000), p.total_q, p.heads_q, head_dim);
  p.d_q = TensorRef::bnhd(fake(0x800000), p.total_q, p.heads_q, head_dim);
  p.d_k = TensorRef::bnhd(fake(0x900000), p.total_k, p.heads_kv, head_dim);
  p.d_v = TensorRef::bnhd(fake(0xA00000), p.total_k, p.heads_kv, head_dim);
  p.cu_seqlens_q = fake<const std::int32_t>(0x500000);
  p.cu_seqlens_k = fake<const std::int32_t>(0x500100);
  p.lse = fake<const float>(0x600000);
  return p;
}

struct InvalidCase {
  std::string what;
  std::function<void(VarlenBackwardParams&)> mutate;
  std::vector<std::string> names;  // substrings the message must contain
};

std::vector<InvalidCase> invalid_cases() {
  std::vector<InvalidCase> cases;
  auto add = [&](std::string what, std::function<void(VarlenBackwardParams&)> mutate,
                 std::vector<std::string> names) {
    cases.push_back({std::move(what), std::move(mutate), std::move(names)});
  };
  // The backward's own arguments.
  add("null lse", [](VarlenBackwardParams& p) { p.lse = nullptr; }, {"lse", "null"});
  add("lse 2-byte aligned", [](VarlenBackwardParams& p) { p.lse = fake<const float>(0x600002); },
      {"lse", "aligned"});
  add("null d_o", [](VarlenBackwardParams& p) { p.d_o.data = nullptr; }, {"d_o.data", "null"});
  add("d_o stride_seq off by one", [](VarlenBackwardParams& p) { p.d_o.stride_seq += 1; },
      {"d_o.stride_seq"});
  add("d_q stride_dim 2", [](VarlenBackwardParams& p) { p.d_q.stride_dim = 2; }, {"d_q.stride_dim"});
  add("null d_k", [](VarlenBackwardParams& p) { p.d_k.data = nullptr; }, {"d_k.data", "null"});
  add("d_v negative stride_head", [](VarlenBackwardParams& p) { p.d_v.stride_head = -64; },
      {"d_v.stride_head"});
  add("d_v 8-byte aligned", [](VarlenBackwardParams& p) { p.d_v.data = fake(0xA00008); },
      {"d_v.data", "aligned"});
  // The forward's, through the same checks.
  add("null cu_seqlens_q", [](VarlenBackwardParams& p) { p.cu_seqlens_q = nullptr; },
      {"cu_seqlens_q", "null"});
  add("seqused_k 2-byte aligned",
      [](VarlenBackwardParams& p) { p.seqused_k = fake<const std::int32_t>(0x500202); },
      {"seqused_k", "aligned"});
  add("null o", [](VarlenBackwardParams& p) { p.o.data = nullptr; }, {"o.data", "null"});
  add("max_seqlen_q past total_q", [](VarlenBackwardParams& p) { p.max_seqlen_q = p.total_q + 1; },
      {"max_seqlen_q", "total_q"});
  add("max_seqlen_k past total_k", [](VarlenBackwardParams& p) { p.max_seqlen_k = p.total_k + 1; },
      {"max_seqlen_k", "total_k"});
  add("heads_q 6 with heads_kv 4", [](VarlenBackwardParams& p) { p.heads_q = 6, p.heads_kv = 4; },
      {"heads_q", "heads_kv"});
  add("head_dim 12", [](VarlenBackwardParams& p) { p.head_dim = 12; }, {"head_dim"});
  add("mask 3", [](VarlenBackwardParams& p) { p.mask = static_cast<MaskKind>(3); }, {"mask"});
  add("softmax_scale inf",
      [](VarlenBackwardParams& p) { p.softmax_scale = std::numeric_limits<float>::infinity(); },
      {"softmax_scale"});
  // Tiles, checked by validate_varlen_backward (a call checks them when it resolves).
  add("config block_n 12",
      [](VarlenBackwardParams& p) {
        p.config = TileConfig{64, 12, 4, 1};
      },
      {"config", "block_n"});
  add("dq_config block_m 24",
      [](VarlenBackwardParams& p) {
        p.dq_config = TileConfig{24, 64, 4, 1};
      },
      {"dq_config", "block_m"});
  return cases;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("validate_varlen_backward accepts valid calls") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (std::int64_t head_dim : {32, 64, 96, 128, 256})
      for (MaskKind mask : kMaskKinds) {
        INFO(to_string(dtype) << " d=" << head_dim << " " << to_string(mask));
        VarlenBackwardParams p = valid_params(dtype, head_dim);
        p.mask = mask;
        CHECK_NOTHROW(validate_varlen_backward(p));
      }
  VarlenBackwardParams p = valid_params();
  p.seqused_k = fake<const std::int32_t>(0x500200);
  p.softmax_scale = -0.5f;
  p.max_seqlen_k = 0;      // no sequence has keys
  p.d_q.stride_batch = 7;  // a packed tensor is one batch: the field is not read
  p.config = TileConfig{64, 64, 4, 2};
  p.dq_config = TileConfig{64, 64, 4, 2};
  CHECK_NOTHROW(validate_varlen_backward(p));
  p.total_k = 0;  // no keys at all
  CHECK_NOTHROW(validate_varlen_backward(p));
}

TEST_CASE("validate_varlen_backward: each invalid argument throws kInvalidArgument naming it") {
  const auto cases = invalid_cases();
  for (const InvalidCase& c : cases) {
    INFO(c.what);
    VarlenBackwardParams p = valid_params();
    c.mutate(p);
    const Error e = test::expect_error([&] { validate_varlen_backward(p); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    INFO("message: " << e.message());
    for (const std::string& name : c.names) CHECK(contains(e.message(), name));
    // The call checks the same arguments before it needs a device, so nothing is launched.
    if (!contains(c.what, "config")) {
      const Error launch = test::expect_error([&] { attention_varlen_backward(p); });
      CHECK(launch.code() == ErrorCode::kInvalidArgument);
      for (const std::string& name : c.names) CHECK(contains(launch.message(), name));
    }
  }
}

TEST_CASE("validate_varlen_backward: fp32 has no portable backward family and is kUnsupported") {
  const Error e = test::expect_error([&] { validate_varlen_backward(valid_params(DType::kFloat32)); });
  CHECK(e.code() == ErrorCode::kUnsupported);
  CHECK(contains(e.message(), "fp32"));
}

TEST_CASE("attention_varlen_backward with valid arguments and no GPU throws kNoDevice") {
  if (device_available()) {
    MESSAGE(
        "a device is present; the no-device path is not testable here (fake pointers are never launched)");
    return;
  }
  CHECK(test::expect_error([&] { attention_varlen_backward(valid_params()); }).code() ==
        ErrorCode::kNoDevice);
}

TEST_CASE("a varlen backward resolves to the pre-pass and the varlen families from its host bounds") {
  VarlenBackwardParams p = valid_params(DType::kBFloat16, 128);
  p.mask = MaskKind::kCausalBottomRight;
  p.config = TileConfig{32, 64, 4, 2};
  const struct {
    Operation op;
    const char* family;
    const char* kernel;
    const char* sm90_family;  // on sm_90a: the explicit tile keeps the main kernel portable, not the dQ pass
    const char* sm90_kernel;
  } kernels[] = {{Operation::kBackwardPrep, "bwd-prep", nullptr, "bwd-prep", nullptr},
                 {Operation::kBackwardVarlen, "varlen-bwd-mma", "flashrtc::attention_backward_mma<",
                  "varlen-bwd-mma", "flashrtc::attention_backward_mma<"},
                 {Operation::kBackwardDqVarlen, "varlen-bwd-dq-mma", "flashrtc::attention_backward_dq_mma<",
                  "varlen-bwd-dq-wgmma", "flashrtc::attention_backward_dq_wgmma<"}};
  for (const auto& k : kernels) {
    INFO(to_string(k.op));
    const ConfigQuery q = config_query(p, k.op);
    CHECK(q.operation == k.op);
    CHECK(q.seqlen_q == p.max_seqlen_q);
    CHECK(q.seqlen_kv == p.max_seqlen_k);
    CHECK(q.mask == p.mask);
    CHECK(q.explicit_config == (k.op == Operation::kBackwardVarlen ? p.config : std::nullopt));
    for (const char* arch : {"sm_80", "sm_90a", "sm_100", "sm_120"}) {
      INFO(std::string(arch));
      DeviceTarget target = no_device_target();
      target.arch = arch;
      const ConfigResolution r = resolve_config(q, target);
      const bool sm90 = std::string(arch) == "sm_90a";
      REQUIRE(r.family != nullptr);
      CHECK(r.family->name == (sm90 ? k.sm90_family : k.family));
      if (!k.kernel) continue;
      // The dense kernel template's variable-length instantiation.
      const std::string name = r.family->name_expression(call_kernel_spec(q, r));
      CHECK(name.rfind(sm90 ? k.sm90_kernel : k.kernel, 0) == 0);
      CHECK(contains(name, "Mask::kCausalBottomRight, true>"));
    }
  }
  CHECK(test::expect_error([&] { config_query(p, Operation::kBackward); }).code() ==
        ErrorCode::kInvalidArgument);
}

TEST_CASE("varlen backward launches: per (sequence, head, block of the max length), batch strides 0") {
  VarlenBackwardParams p = valid_params(DType::kFloat16, 64);
  p.seqused_k = fake<const std::int32_t>(0x500200);
  p.q.stride_batch = 12345 * 8;  // not used: the kernels move each block to its sequence's first row
  p.softmax_scale = 0.5f;
  BackwardParams dense;  // as attention_varlen_backward builds it
  dense.batch = p.batch;
  dense.seqlen_q = p.max_seqlen_q;
  dense.seqlen_kv = p.max_seqlen_k;
  dense.heads_q = p.heads_q;
  dense.heads_kv = p.heads_kv;
  dense.head_dim = p.head_dim;
  dense.q = p.q;
  dense.q.stride_batch = 0;
  dense.lse = p.lse;
  dense.softmax_scale = p.softmax_scale;
  detail::VarlenBackwardLaunch call;
  call.params = &p;
  call.dense.params = &dense;
  call.dense.d_rows = fake<float>(0xB00000);

  CallPlan plan;
  plan.spec.tile = TileConfig{16, 64, 1, 2};
  plan.threads = 32;
  const auto launch = [&](const char* family, LaunchShape& shape) {
    plan.family = find_kernel_family(family);
    REQUIRE(plan.family != nullptr);
    KernelArgs args;
    plan.family->build_launch(plan, &call, shape, args);
    REQUIRE(args.count == 1);
    kernel::VarlenBackwardParams k;
    std::memcpy(&k, args.pointers[0], sizeof k);
    return k;
  };
  LaunchShape shape;
  kernel::VarlenBackwardParams k = launch("varlen-bwd-mma", shape);
  CHECK(shape.grid[0] == 3u * 2 * 1);  // ceil(30 / 64) key blocks per (sequence, kv head)
  CHECK(shape.block[0] == 32u);
  CHECK(k.dense.num_blocks == 1);
  CHECK(k.dense.seqlen_q == 20);
  CHECK(k.dense.seqlen_kv == 30);
  CHECK(k.dense.q_stride_batch == 0);
  CHECK(k.dense.q_stride_seq == 4 * 64);
  CHECK(k.dense.kv_group == 2);
  CHECK(k.dense.lse == p.lse);
  CHECK(k.dense.d_rows == call.dense.d_rows);
  CHECK(k.dense.dq_accum == nullptr);
  CHECK(k.dense.scale == doctest::Approx(0.5));
  CHECK(k.cu_seqlens_q == p.cu_seqlens_q);
  CHECK(k.cu_seqlens_k == p.cu_seqlens_k);
  CHECK(k.seqused_k == p.seqused_k);
  CHECK(k.total_q == 40);
  CHECK(k.total_k == 50);

  k = launch("varlen-bwd-dq-mma", shape);
  CHECK(shape.grid[0] == 3u * 4 * 2);  // ceil(20 / 16) query blocks per (sequence, query head)
  CHECK(k.dense.num_blocks == 2);

  // No key in any sequence: still one block per (sequence, kv head), never an empty grid.
  p.max_seqlen_k = 0;
  launch("varlen-bwd-mma", shape);
  CHECK(shape.grid[0] == 3u * 2);

  // The grid's index limit, as the dense backward's.
  p.batch = 1 << 20;
  p.heads_q = 1 << 12;
  p.max_seqlen_q = p.total_q = 1 << 10;
  plan.family = find_kernel_family("varlen-bwd-dq-mma");
  KernelArgs args;
  CHECK(test::expect_error([&] { plan.family->build_launch(plan, &call, shape, args); }).code() ==
        ErrorCode::kInvalidArgument);
}

namespace {

// The families of a call's main kernel and dQ pass on `arch`, without an explicit tile.
std::pair<std::string, std::string> backward_families(const VarlenBackwardParams& p, const char* arch) {
  DeviceTarget target = no_device_target();
  target.arch = arch;
  return {resolve_config(config_query(p, Operation::kBackwardVarlen), target).family->name,
          resolve_config(config_query(p, Operation::kBackwardDqVarlen), target).family->name};
}

}  // namespace

TEST_CASE(
    "on sm_90a a varlen backward runs the Hopper pair where the dense Hopper pair would, else the portable") {
  const std::pair<std::string, std::string> hopper{"varlen-bwd-wgmma", "varlen-bwd-dq-wgmma"};
  const std::pair<std::string, std::string> portable{"varlen-bwd-mma", "varlen-bwd-dq-mma"};
  for (MaskKind mask : kMaskKinds)
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (std::int64_t d : {32, 64, 96, 128, 160, 256}) {
        INFO(to_string(mask) << " " << to_string(dtype) << " d=" << d);
        VarlenBackwardParams p = valid_params(dtype, d);
        p.mask = mask;
        const bool served = d == 64 || d == 96 || d == 128;
        CHECK(backward_families(p, "sm_90a") == (served ? hopper : portable));
        for (const char* arch : {"sm_80", "sm_100", "sm_120"}) CHECK(backward_families(p, arch) == portable);
      }
  // A zero head stride over more than one head (K and V broadcast) is no TMA map: both passes stay portable.
  VarlenBackwardParams p = valid_params(DType::kBFloat16, 128);
  p.v.stride_head = 0;
  CHECK(config_query(p, Operation::kBackwardVarlen).traits == 0u);
  CHECK(backward_families(p, "sm_90a") == portable);
  p = valid_params(DType::kBFloat16, 128);
  p.d_o.stride_head = 0;
  CHECK(backward_families(p, "sm_90a") == portable);
}

TEST_CASE("the Hopper varlen backward families: the dense Hopper pair's kernels, tiles and defaults") {
  const struct {
    const char* dense;
    const char* varlen;
    Operation op;
    const char* portable;  // the family it ranks above, if any
  } pairs[] = {{"bwd-wgmma", "varlen-bwd-wgmma", Operation::kBackwardVarlen, "varlen-bwd-mma"},
               {"bwd-dq-wgmma", "varlen-bwd-dq-wgmma", Operation::kBackwardDqVarlen, "varlen-bwd-dq-mma"},
               {"bwd-wgmma-fused", "varlen-bwd-wgmma-fused", Operation::kBackwardFusedVarlen, nullptr}};
  for (const auto& pair : pairs) {
    INFO(pair.varlen);
    const KernelFamily& dense = *find_kernel_family(pair.dense);
    const KernelFamily* varlen = find_kernel_family(pair.varlen);
    REQUIRE(varlen != nullptr);
    CHECK(varlen->operation == pair.op);
    CHECK(varlen->needs_arch_specific);
    CHECK(varlen->header == dense.header);
    CHECK(varlen->kernel_template == dense.kernel_template);
    CHECK(varlen->takes(TemplateArg::kVarlen));
    if (pair.portable) CHECK(varlen->priority > find_kernel_family(pair.portable)->priority);
    for (MaskKind mask : kMaskKinds)
      for (int d : {64, 96, 128})
        for (std::int64_t keys : {0, 512, 4096})
          CHECK(varlen->default_config(DType::kBFloat16, d, mask, kSmemBytesSm90, keys, "sm_90a") ==
                dense.default_config(DType::kBFloat16, d, mask, kSmemBytesSm90, keys, "sm_90a"));
  }
}

TEST_CASE("the Hopper varlen backward kernels compile for sm_90a without spills or serialized wgmma") {
  // A sample of the defaults: each head dim the pair serves under one mask each.
  RuntimeConfig config = runtime_config();
  config.disk_cache = false;  // compiled by this build's NVRTC, not read from an older entry
  config.always_compile = false;
  config.require_cached = false;
  test::ConfigOverride scoped(config);
  const struct {
    int head_dim;
    MaskKind mask;
  } samples[] = {{64, MaskKind::kCausalBottomRight}, {96, MaskKind::kNone}, {128, MaskKind::kCausalTopLeft}};
  for (const char* name :
       {"varlen-bwd-wgmma", "varlen-bwd-dq-wgmma", "varlen-bwd-wgmma-fused", "varlen-bwd-dq-convert"})
    for (const auto& sample : samples) {
      const KernelFamily& family = *find_kernel_family(name);
      const KernelSpec spec{
          DType::kBFloat16, sample.head_dim, sample.mask,
          family.default_config(DType::kBFloat16, sample.head_dim, sample.mask, kSmemBytesSm90, 0, "sm_90a"),
          &family};
      INFO(name << " d=" << sample.head_dim << " " << to_string(sample.mask) << " " << to_string(spec.tile));
      const ResourceReport r = compile_kernel(spec, "sm_90a").resources;
      INFO("registers=" << r.registers << " spill stores=" << r.spill_store_bytes
                        << " spill loads=" << r.spill_load_bytes);
      CHECK(r.registers > 0);
      CHECK(r.spill_store_bytes == 0);
      CHECK(r.spill_load_bytes == 0);
      INFO(r.wgmma_serialized_reason);
      CHECK_FALSE(r.wgmma_serialized);  // the clearing and the selects keep the products pipelined
    }
}

TEST_CASE(
    "a varlen backward takes the fused pair exactly where the dense backward of its longest keys would") {
  const auto varlen_of = [](Operation op) {
    switch (op) {
      case Operation::kBackward:
        return Operation::kBackwardVarlen;
      case Operation::kBackwardDq:
        return Operation::kBackwardDqVarlen;
      case Operation::kBackwardFused:
        return Operation::kBackwardFusedVarlen;
      case Operation::kBackwardDqConvert:
        return Operation::kBackwardDqConvertVarlen;
      default:
        return op;
    }
  };
  int fused = 0;
  for (bool deterministic : {false, true})
    for (MaskKind mask : kMaskKinds)
      for (DType dtype : {DType::kFloat16, DType::kBFloat16})
        for (std::int64_t d : {64, 128, 256})
          for (std::int64_t keys : {1, 2047, 2048, 4096})
            for (const char* arch : {"sm_80", "sm_90a"}) {
              INFO(deterministic << " " << to_string(mask) << " " << to_string(dtype) << " d=" << d
                                 << " keys=" << keys << " " << arch);
              VarlenBackwardParams p = valid_params(dtype, d);
              p.mask = mask;
              p.deterministic = deterministic;
              p.total_k = p.max_seqlen_k = keys;
              BackwardParams dense;
              dense.dtype = dtype;
              dense.head_dim = d;
              dense.mask = mask;
              dense.seqlen_q = p.max_seqlen_q;
              dense.seqlen_kv = keys;
              dense.deterministic = deterministic;
              const std::array<Operation, 3> expected = backward_operations(dense, arch);
              // The dense fused kernel at d = 256 (bwd-wgmma-split) has no varlen variant: the pair runs.
              const bool split = d == 256 && expected[1] == Operation::kBackwardFused;
              const std::array<Operation, 3> ops = varlen_backward_operations(p, arch);
              if (split) {
                CHECK(ops[1] == Operation::kBackwardVarlen);
                continue;
              }
              CHECK(ops[0] == Operation::kBackwardPrep);
              CHECK(ops[1] == varlen_of(expected[1]));
              CHECK(ops[2] == varlen_of(expected[2]));
              fused += ops[1] == Operation::kBackwardFusedVarlen;
              // Every kernel resolves on its arch, the explicit tile going to the main kernel.
              DeviceTarget target = no_device_target();
              target.arch = arch;
              for (Operation op : ops) CHECK(resolve_config(config_query(p, op), target).family != nullptr);
              CHECK(config_query(p, ops[1]).explicit_config == p.config);
              if (ops[2] == Operation::kBackwardDqConvertVarlen)
                CHECK_FALSE(config_query(p, ops[2]).explicit_config.has_value());
            }
  CHECK(fused > 0);  // the rule picked the fused pair somewhere
  // max_seqlen_k = 0 is a call without keys, short, not an unknown length (which the dense rule judges long).
  VarlenBackwardParams p = valid_params(DType::kBFloat16, 128);
  p.total_k = p.max_seqlen_k = 0;
  CHECK(varlen_backward_operations(p, "sm_90a")[1] == Operation::kBackwardVarlen);
}

TEST_CASE("the varlen dQ conversion's grid covers max_seqlen_q in slices of 64 per (sequence, query head)") {
  VarlenBackwardParams p = valid_params(DType::kBFloat16, 128);
  p.max_seqlen_q = 65;
  BackwardParams dense;  // the fields the kernel parameters read
  dense.heads_q = p.heads_q;
  dense.heads_kv = p.heads_kv;
  dense.head_dim = p.head_dim;
  detail::VarlenBackwardLaunch call;
  call.params = &p;
  call.dense.params = &dense;
  call.dense.dq_tile_rows = 64;
  CallPlan plan;
  plan.family = find_kernel_family("varlen-bwd-dq-convert");
  REQUIRE(plan.family != nullptr);
  plan.spec.tile = TileConfig{16, 1, 4, 1};
  plan.threads = 128;
  LaunchShape shape;
  KernelArgs args;
  plan.family->build_launch(plan, &call, shape, args);
  CHECK(shape.grid[0] == static_cast<unsigned>(2 * p.batch * p.heads_q));
  // A workspace of no tiles (the deterministic pair's) is not converted.
  call.dense.dq_tile_rows = 0;
  CHECK(test::expect_error([&] { plan.family->build_launch(plan, &call, shape, args); }).code() ==
        ErrorCode::kInternal);
}

TEST_CASE(
    "varlen backward variants: invalid values and d_sinks throw kInvalidArgument, valid ones kUnsupported") {
  const auto validate = [](const VarlenBackwardParams& p) { validate_varlen_backward(p); };
  const auto run = [](const VarlenBackwardParams& p) { attention_varlen_backward(p); };
  test::check_variant_cases(valid_params(), validate);
  test::check_variant_cases(valid_params(), run);
  test::check_sink_gradient_cases(valid_params(), validate);
  test::check_sink_gradient_cases(valid_params(), run);
}

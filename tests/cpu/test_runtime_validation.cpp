// Argument validation of the C++ forward API (the C API's is in test_c_api.cpp): every rule throws
// kInvalidArgument naming the argument, before anything touches a device. Pointers are fake (never
// dereferenced without a device).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "cpu/helpers/variant_cases.hpp"
#include "flashrtc/attention.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/tile_config.hpp"

using namespace flashrtc;

namespace {

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

const void* fake_pointer(std::uintptr_t address) {
  return reinterpret_cast<const void*>(address);
}

// A valid call: B=2, Nq=17, Nk=33, Hq=4, Hkv=2 (GQA), contiguous [B, N, H, d], 16-byte aligned fake pointers.
ForwardParams valid_params(DType dtype = DType::kFloat16, std::int64_t head_dim = 64) {
  ForwardParams p;
  p.dtype = dtype;
  p.batch = 2;
  p.seqlen_q = 17;
  p.seqlen_kv = 33;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = head_dim;
  p.q = TensorRef::bnhd(fake_pointer(0x100000), p.seqlen_q, p.heads_q, head_dim);
  p.k = TensorRef::bnhd(fake_pointer(0x200000), p.seqlen_kv, p.heads_kv, head_dim);
  p.v = TensorRef::bnhd(fake_pointer(0x300000), p.seqlen_kv, p.heads_kv, head_dim);
  p.o = TensorRef::bnhd(fake_pointer(0x400000), p.seqlen_q, p.heads_q, head_dim);
  p.lse = reinterpret_cast<float*>(0x500000);
  return p;
}

struct InvalidCase {
  std::string what;
  std::function<void(ForwardParams&)> mutate;
  std::vector<std::string> names;  // substrings the message must contain
};

std::vector<InvalidCase> invalid_cases() {
  std::vector<InvalidCase> cases;
  auto add = [&](std::string what, std::function<void(ForwardParams&)> mutate,
                 std::vector<std::string> names) {
    cases.push_back({std::move(what), std::move(mutate), std::move(names)});
  };
  // Pointers.
  add("null q", [](ForwardParams& p) { p.q.data = nullptr; }, {"q.data", "null"});
  add("null k", [](ForwardParams& p) { p.k.data = nullptr; }, {"k.data", "null"});
  add("null v", [](ForwardParams& p) { p.v.data = nullptr; }, {"v.data", "null"});
  add("null o", [](ForwardParams& p) { p.o.data = nullptr; }, {"o.data", "null"});
  add("q 8-byte aligned", [](ForwardParams& p) { p.q.data = fake_pointer(0x100008); }, {"q.data", "aligned"});
  add("k 2-byte aligned", [](ForwardParams& p) { p.k.data = fake_pointer(0x200002); }, {"k.data", "aligned"});
  add("o 4-byte aligned", [](ForwardParams& p) { p.o.data = fake_pointer(0x400004); }, {"o.data", "aligned"});
  add("lse 2-byte aligned", [](ForwardParams& p) { p.lse = reinterpret_cast<float*>(0x500002); }, {"lse"});
  // Strides.
  add("q stride_dim 2", [](ForwardParams& p) { p.q.stride_dim = 2; }, {"q.stride_dim"});
  add("v stride_dim 0", [](ForwardParams& p) { p.v.stride_dim = 0; }, {"v.stride_dim"});
  add("o stride_dim -1", [](ForwardParams& p) { p.o.stride_dim = -1; }, {"o.stride_dim"});
  add("negative k stride_seq", [](ForwardParams& p) { p.k.stride_seq = -p.k.stride_seq; },
      {"k.stride_seq", ">= 0"});
  add("negative q stride_batch", [](ForwardParams& p) { p.q.stride_batch = -8; }, {"q.stride_batch", ">= 0"});
  add("negative o stride_head", [](ForwardParams& p) { p.o.stride_head = -64; }, {"o.stride_head"});
  add("fp16 q stride_head 4 (8 bytes)", [](ForwardParams& p) { p.q.stride_head = 4; },
      {"q.stride_head", "16 bytes"});
  add("fp16 v stride_seq 132 (264 bytes)", [](ForwardParams& p) { p.v.stride_seq = 132; }, {"v.stride_seq"});
  add("fp16 o stride_batch odd", [](ForwardParams& p) { p.o.stride_batch += 1; }, {"o.stride_batch"});
  add("fp32 k stride_head 6 (24 bytes)",
      [](ForwardParams& p) {
        p = valid_params(DType::kFloat32);
        p.k.stride_head = 6;
      },
      {"k.stride_head"});
  // Enums.
  add("dtype 3", [](ForwardParams& p) { p.dtype = static_cast<DType>(3); }, {"dtype"});
  add("dtype -1", [](ForwardParams& p) { p.dtype = static_cast<DType>(-1); }, {"dtype"});
  add("mask 3", [](ForwardParams& p) { p.mask = static_cast<MaskKind>(3); }, {"mask"});
  add("mask -1", [](ForwardParams& p) { p.mask = static_cast<MaskKind>(-1); }, {"mask"});
  // Sizes.
  add("batch 0", [](ForwardParams& p) { p.batch = 0; }, {"batch"});
  add("batch -1", [](ForwardParams& p) { p.batch = -1; }, {"batch"});
  add("seqlen_q 0", [](ForwardParams& p) { p.seqlen_q = 0; }, {"seqlen_q"});
  add("seqlen_kv 0", [](ForwardParams& p) { p.seqlen_kv = 0; }, {"seqlen_kv"});
  add("seqlen_kv -5", [](ForwardParams& p) { p.seqlen_kv = -5; }, {"seqlen_kv"});
  add("heads_q 0", [](ForwardParams& p) { p.heads_q = 0; }, {"heads_q"});
  add("heads_kv 0", [](ForwardParams& p) { p.heads_kv = 0; }, {"heads_kv"});
  add("heads_kv -2", [](ForwardParams& p) { p.heads_kv = -2; }, {"heads_kv"});
  add("head_dim 0", [](ForwardParams& p) { p.head_dim = 0; }, {"head_dim"});
  add("head_dim 7", [](ForwardParams& p) { p.head_dim = 7; }, {"head_dim"});
  add("head_dim 12", [](ForwardParams& p) { p.head_dim = 12; }, {"head_dim"});
  add("head_dim 264", [](ForwardParams& p) { p.head_dim = 264; }, {"head_dim"});
  add("head_dim -64", [](ForwardParams& p) { p.head_dim = -64; }, {"head_dim"});
  add("head_dim 2^32 + 64", [](ForwardParams& p) { p.head_dim = (std::int64_t{1} << 32) + 64; },
      {"head_dim"});
  add("heads_q 6 with heads_kv 4",
      [](ForwardParams& p) {
        p.heads_q = 6;
        p.heads_kv = 4;
      },
      {"heads_q", "heads_kv"});
  add("heads_q 2 with heads_kv 4", [](ForwardParams& p) { p.heads_q = 2, p.heads_kv = 4; }, {"heads_q"});
  add("softmax_scale NaN", [](ForwardParams& p) { p.softmax_scale = std::nanf(""); }, {"softmax_scale"});
  add("softmax_scale +inf", [](ForwardParams& p) { p.softmax_scale = INFINITY; }, {"softmax_scale"});
  add("softmax_scale -inf", [](ForwardParams& p) { p.softmax_scale = -INFINITY; }, {"softmax_scale"});
  // 32-bit index limits of the kernels, and 64-bit byte offsets.
  add("seqlen_q 2^31", [](ForwardParams& p) { p.seqlen_q = kInt32Max + 1; }, {"seqlen_q", "overflow"});
  add("seqlen_kv 2^31", [](ForwardParams& p) { p.seqlen_kv = kInt32Max + 1; }, {"seqlen_kv", "overflow"});
  add("batch 2^40", [](ForwardParams& p) { p.batch = std::int64_t{1} << 40; }, {"batch", "overflow"});
  add("heads_q 2^31",
      [](ForwardParams& p) {
        p.heads_q = kInt32Max + 1;
        p.heads_kv = 1;
      },
      {"heads_q", "overflow"});
  add("q stride_batch 2^62 (byte offset past 2^63)",
      [](ForwardParams& p) { p.q.stride_batch = std::int64_t{1} << 62; }, {"q", "overflow"});
  add("k stride_seq near INT64_MAX",
      [](ForwardParams& p) { p.k.stride_seq = std::numeric_limits<std::int64_t>::max() / 8 * 8; },
      {"k", "overflow"});
  add("o strides summing past 2^63",
      [](ForwardParams& p) {
        // fp16: (2 - 1) * 2^61 * 2 bytes = 2^62 and (17 - 1) * 2^57 * 2 bytes = 2^62; each fits, the sum does
        // not.
        p.o.stride_batch = std::int64_t{1} << 61;
        p.o.stride_seq = std::int64_t{1} << 57;
      },
      {"o", "overflow"});
  add("batch * heads_q * seqlen_q past 2^61 (lse index)",
      [](ForwardParams& p) {
        p.batch = p.seqlen_q = p.heads_q = p.heads_kv = kInt32Max;
        for (TensorRef* t : {&p.q, &p.k, &p.v, &p.o}) t->stride_batch = t->stride_seq = t->stride_head = 0;
      },
      {"overflow"});
  // Explicit tiles.
  add("config block_n 12",
      [](ForwardParams& p) {
        p.config = TileConfig{64, 12, 4, 1};
      },
      {"config", "block_n"});
  add("config block_m 0",
      [](ForwardParams& p) {
        p.config = TileConfig{0, 64, 4, 1};
      },
      {"config", "block_m"});
  add("config warps 3", [](ForwardParams& p) { p.config = TileConfig{64, 64, 3, 1}; }, {"config", "warps"});
  add("config stages 4", [](ForwardParams& p) { p.config = TileConfig{64, 64, 4, 4}; }, {"config", "stages"});
  add("config over 227 KB of shared memory",
      [](ForwardParams& p) {
        p = valid_params(DType::kFloat32, 256);
        p.config = TileConfig{128, 128, 16, 2};
      },
      {"config", "shared memory"});
  return cases;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("validate_forward accepts valid calls") {
  CHECK_NOTHROW(validate_forward(valid_params()));
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    for (std::int64_t head_dim : {8, 32, 64, 72, 96, 128, 200, 256})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
        INFO(to_string(dtype) << " d=" << head_dim << " " << to_string(mask));
        ForwardParams p = valid_params(dtype, head_dim);
        p.mask = mask;
        CHECK_NOTHROW(validate_forward(p));
      }
  SUBCASE("[B, H, N, d] layout") {
    ForwardParams p = valid_params();
    p.q = TensorRef::bhnd(p.q.data, p.seqlen_q, p.heads_q, p.head_dim);
    p.k = TensorRef::bhnd(p.k.data, p.seqlen_kv, p.heads_kv, p.head_dim);
    p.v = TensorRef::bhnd(p.v.data, p.seqlen_kv, p.heads_kv, p.head_dim);
    p.o = TensorRef::bhnd(p.o.data, p.seqlen_q, p.heads_q, p.head_dim);
    CHECK_NOTHROW(validate_forward(p));
  }
  SUBCASE("optional fields and edge values") {
    ForwardParams p = valid_params();
    p.lse = nullptr;
    p.softmax_scale = 0.125f;
    CHECK_NOTHROW(validate_forward(p));
    p.heads_q = 8, p.heads_kv = 1;  // MQA
    p.q = TensorRef::bnhd(p.q.data, p.seqlen_q, p.heads_q, p.head_dim);
    p.o = TensorRef::bnhd(p.o.data, p.seqlen_q, p.heads_q, p.head_dim);
    p.k = TensorRef::bnhd(p.k.data, p.seqlen_kv, p.heads_kv, p.head_dim);
    p.v = TensorRef::bnhd(p.v.data, p.seqlen_kv, p.heads_kv, p.head_dim);
    CHECK_NOTHROW(validate_forward(p));
    p.k.stride_batch = p.v.stride_batch = 0;  // one K/V broadcast over the batch
    CHECK_NOTHROW(validate_forward(p));
    p.seqlen_q = p.seqlen_kv = 1;
    CHECK_NOTHROW(validate_forward(p));
    p.config = TileConfig{64, 32, 4, 2};
    CHECK_NOTHROW(validate_forward(p));
  }
  SUBCASE("a tile only the Hopper family builds") {
    // Explicit tiles run on the best family that builds them: a validation that knew only the portable
    // family refused every wgmma tile.
    ForwardParams p = valid_params(DType::kBFloat16, 128);
    p.config = TileConfig{128, 160, 12, 2};
    REQUIRE(check_forward_config(p.dtype, 128, *p.config, kSmemBytesSm90) != "");
    CHECK_NOTHROW(validate_forward(p));
    p.config = TileConfig{128, 160, 10, 2};  // no family has 10-warp tiles
    CHECK(test::expect_error([&] { validate_forward(p); }).code() == ErrorCode::kInvalidArgument);
  }
  SUBCASE("the largest lengths the kernels index with 32 bits") {
    ForwardParams p = valid_params();
    p.seqlen_q = p.seqlen_kv = kInt32Max;
    p.q = TensorRef::bnhd(p.q.data, p.seqlen_q, p.heads_q, p.head_dim);
    p.o = TensorRef::bnhd(p.o.data, p.seqlen_q, p.heads_q, p.head_dim);
    p.k = TensorRef::bnhd(p.k.data, p.seqlen_kv, p.heads_kv, p.head_dim);
    p.v = TensorRef::bnhd(p.v.data, p.seqlen_kv, p.heads_kv, p.head_dim);
    CHECK_NOTHROW(validate_forward(p));
  }
}

TEST_CASE("validate_forward: each invalid argument throws kInvalidArgument naming it") {
  const auto cases = invalid_cases();
  REQUIRE(cases.size() > 50);
  for (const InvalidCase& c : cases) {
    INFO(c.what);
    ForwardParams p = valid_params();
    c.mutate(p);
    const Error e = test::expect_error([&] { validate_forward(p); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    INFO("message: " << e.message());
    for (const std::string& name : c.names) CHECK(contains(e.message(), name));
    CHECK(contains(e.what(), "InvalidArgument"));
    // select_forward_spec validates first, too.
    CHECK(test::expect_error([&] { select_forward_spec(p); }).code() == ErrorCode::kInvalidArgument);
  }
}

TEST_CASE("attention_forward validates before it needs a device") {
  // Invalid arguments are reported as such whether or not a GPU is present: nothing is launched.
  const auto cases = invalid_cases();
  for (const InvalidCase& c : cases) {
    INFO(c.what);
    ForwardParams p = valid_params();
    c.mutate(p);
    const Error e = test::expect_error([&] { attention_forward(p); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    for (const std::string& name : c.names) CHECK(contains(e.message(), name));
  }
}

TEST_CASE("attention_forward with valid arguments and no GPU throws kNoDevice") {
  if (device_available()) {
    MESSAGE(
        "a device is present; the no-device path is not testable here (fake pointers are never launched)");
    return;
  }
  CHECK_FALSE(device_unavailable_reason().empty());
  const Error e = test::expect_error([&] { attention_forward(valid_params()); });
  CHECK(e.code() == ErrorCode::kNoDevice);
  CHECK_FALSE(e.message().empty());
  // Without a device, the spec is chosen for sm_80's shared memory, valid on every GPU we target.
  const KernelSpec spec = select_forward_spec(valid_params(DType::kFloat32, 128));
  CHECK(spec.tile == default_forward_config(DType::kFloat32, 128, MaskKind::kNone));
  CHECK(forward_smem_bytes(spec.dtype, spec.head_dim, spec.tile) <= kSmemBytesSm80);
}

TEST_CASE("select_forward_spec reflects the call") {
  ForwardParams p = valid_params(DType::kBFloat16, 96);
  p.mask = MaskKind::kCausalBottomRight;
  KernelSpec spec = select_forward_spec(p);
  CHECK(spec.dtype == DType::kBFloat16);
  CHECK(spec.head_dim == 96);
  CHECK(spec.mask == MaskKind::kCausalBottomRight);
  CHECK(check_forward_config(spec.dtype, spec.head_dim, spec.tile, kSmemBytesSm90) == "");
  p.config = TileConfig{64, 32, 4, 1};  // 16 query rows per warp: a tile of the tensor-core family
  spec = select_forward_spec(p);
  CHECK(spec.tile == TileConfig{64, 32, 4, 1});
}

TEST_CASE("AttentionVariants: the defaults are off; any() sees every field") {
  CHECK(!AttentionVariants{}.any());
  const std::vector<std::function<void(AttentionVariants&)>> set = {
      [](AttentionVariants& v) { v.window_left = 0; },
      [](AttentionVariants& v) { v.window_right = 5; },
      [](AttentionVariants& v) { v.softcap = 1.f; },
      [](AttentionVariants& v) { v.alibi_slopes = test::fake_floats(0xA00000); },
      [](AttentionVariants& v) { v.alibi_stride_batch = 4; },
      [](AttentionVariants& v) { v.sinks = test::fake_floats(0xB00000); },
  };
  for (const auto& s : set) {
    AttentionVariants v;
    s(v);
    CHECK(v.any());
  }
}

TEST_CASE(
    "forward variants: invalid values throw kInvalidArgument, ALiBi and sinks kUnsupported (no kernel yet)") {
  // Windows and softcaps run on the tensor-core forward: test_variants_forward.cpp.
  constexpr unsigned kServed = kVariantWindow | kVariantSoftcap;
  test::check_variant_cases(
      valid_params(), [](const ForwardParams& p) { validate_forward(p); }, kServed);
  test::check_variant_cases(
      valid_params(), [](const ForwardParams& p) { select_forward_spec(p); }, kServed);
  test::check_variant_cases(
      valid_params(), [](const ForwardParams& p) { attention_forward(p); }, kServed);
}

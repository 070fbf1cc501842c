// attention_backward's contract without a device: validation of every tensor (typed errors naming it), the
// FLOP convention, the C struct's layout, size rules and defaults, and kBackward calls resolving through the
// family table. Pointers are fake (never dereferenced: calls stop at validation or at NoDevice).
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cpu/helpers/runtime_test_util.hpp"
#include "cpu/helpers/variant_cases.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/c_api.h"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/error.hpp"

using namespace flashrtc;

namespace {

const void* fake_pointer(std::uintptr_t address) {
  return reinterpret_cast<const void*>(address);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A valid bf16 call: B=2, Nq=17, Nk=33, Hq=4, Hkv=2 (GQA), d=64, contiguous [B, N, H, d].
BackwardParams valid_params() {
  BackwardParams p;
  p.dtype = DType::kBFloat16;
  p.batch = 2, p.seqlen_q = 17, p.seqlen_kv = 33, p.heads_q = 4, p.heads_kv = 2, p.head_dim = 64;
  p.q = TensorRef::bnhd(fake_pointer(0x100000), 17, 4, 64);
  p.k = TensorRef::bnhd(fake_pointer(0x200000), 33, 2, 64);
  p.v = TensorRef::bnhd(fake_pointer(0x300000), 33, 2, 64);
  p.o = TensorRef::bnhd(fake_pointer(0x400000), 17, 4, 64);
  p.d_o = TensorRef::bnhd(fake_pointer(0x500000), 17, 4, 64);
  p.lse = static_cast<const float*>(fake_pointer(0x600000));
  p.d_q = TensorRef::bnhd(fake_pointer(0x700000), 17, 4, 64);
  p.d_k = TensorRef::bnhd(fake_pointer(0x800000), 33, 2, 64);
  p.d_v = TensorRef::bnhd(fake_pointer(0x900000), 33, 2, 64);
  return p;
}

std::string invalid_message(const BackwardParams& p) {
  try {
    validate_backward(p);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    return e.what();
  }
  FAIL("accepted");
  return {};
}

flashrtc_tensor c_tensor(const TensorRef& t) {
  return {t.data, t.stride_batch, t.stride_seq, t.stride_head, t.stride_dim};
}

flashrtc_backward_params valid_c_params() {
  const BackwardParams v = valid_params();
  flashrtc_backward_params p;
  flashrtc_backward_params_init(&p);
  p.dtype = FLASHRTC_BFLOAT16;
  p.batch = v.batch, p.seqlen_q = v.seqlen_q, p.seqlen_kv = v.seqlen_kv;
  p.heads_q = v.heads_q, p.heads_kv = v.heads_kv, p.head_dim = v.head_dim;
  p.q = c_tensor(v.q), p.k = c_tensor(v.k), p.v = c_tensor(v.v), p.o = c_tensor(v.o), p.d_o = c_tensor(v.d_o);
  p.lse = v.lse;
  p.d_q = c_tensor(v.d_q), p.d_k = c_tensor(v.d_k), p.d_v = c_tensor(v.d_v);
  return p;
}

flashrtc_status past_validation() {
  return flashrtc::device_available() ? FLASHRTC_OK : FLASHRTC_ERROR_NO_DEVICE;
}

}  // namespace

TEST_CASE("validate_backward: a valid call passes; every tensor is checked by the forward's rules, by name") {
  CHECK_NOTHROW(validate_backward(valid_params()));
  struct Bad {
    const char* name;
    void (*spoil)(BackwardParams&);
  };
  const Bad bad[] = {
      {"q.data", [](BackwardParams& p) { p.q.data = nullptr; }},
      {"k.stride_seq", [](BackwardParams& p) { p.k.stride_seq = 3; }},
      {"v.stride_dim", [](BackwardParams& p) { p.v.stride_dim = 2; }},
      {"o.data", [](BackwardParams& p) { p.o.data = fake_pointer(0x400008); }},
      {"d_o.data", [](BackwardParams& p) { p.d_o.data = nullptr; }},
      {"d_o.stride_head", [](BackwardParams& p) { p.d_o.stride_head = -64; }},
      {"d_q.stride_dim", [](BackwardParams& p) { p.d_q.stride_dim = 0; }},
      {"d_k.data", [](BackwardParams& p) { p.d_k.data = fake_pointer(0x800004); }},
      {"d_v.stride_batch", [](BackwardParams& p) { p.d_v.stride_batch = 12; }},
      {"lse is null", [](BackwardParams& p) { p.lse = nullptr; }},
      {"lse=", [](BackwardParams& p) { p.lse = static_cast<const float*>(fake_pointer(0x600002)); }},
      {"heads_q=4 is not a multiple of heads_kv=3", [](BackwardParams& p) { p.heads_kv = 3; }},
      {"head_dim=1072", [](BackwardParams& p) { p.head_dim = 1072; }},
      {"softmax_scale", [](BackwardParams& p) { p.softmax_scale = std::nanf(""); }},
      {"config: ",
       [](BackwardParams& p) {
         p.config = TileConfig{64, 48, 4, 2};
       }},
  };
  for (const Bad& b : bad) {
    INFO(b.name);
    BackwardParams p = valid_params();
    b.spoil(p);
    const std::string message = invalid_message(p);
    INFO(message);
    CHECK(contains(message, b.name));
  }
  // d_k and d_v are shaped like k: strides fit [B, Nk, Hkv, d], not q's.
  BackwardParams gqa = valid_params();
  gqa.d_k = TensorRef::bnhd(fake_pointer(0x800000), 33, 2, 64);
  CHECK_NOTHROW(validate_backward(gqa));
}

TEST_CASE("attention_backward refuses bad arguments before needing a device") {
  BackwardParams p = valid_params();
  p.d_v.data = nullptr;
  try {
    attention_backward(p);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(contains(e.what(), "d_v.data"));
  }
}

TEST_CASE("attention_backward_flops: 2.5 times the forward's") {
  BackwardParams p = valid_params();
  const double forward = 4.0 * 2 * 4 * 17 * 33 * 64;
  CHECK(attention_backward_flops(p) == doctest::Approx(2.5 * forward));
  p.mask = MaskKind::kCausalTopLeft;
  CHECK(attention_backward_flops(p) == doctest::Approx(2.5 * forward / 2));
}

TEST_CASE("backward calls resolve through the family table, the explicit tile to the main kernel") {
  ConfigQuery q;
  q.dtype = DType::kFloat16, q.head_dim = 128, q.operation = Operation::kBackward;
  const ConfigResolution main = resolve_config(q, no_device_target());
  CHECK(main.family->name == "bwd-mma");
  CHECK(main.config == main.family->default_config(DType::kFloat16, 128, MaskKind::kNone, kSmemBytesSm80));
  q.explicit_config = TileConfig{16, 32, 2, 1};
  CHECK(resolve_config(q, no_device_target()).config == *q.explicit_config);
  q.explicit_config.reset();
  q.operation = Operation::kBackwardDq;
  CHECK(resolve_config(q, no_device_target()).family->name == "bwd-dq-mma");
  q.operation = Operation::kBackwardPrep;
  CHECK(resolve_config(q, no_device_target()).family->name == "bwd-prep");
}

TEST_CASE(
    "backward_operations: the fused kernel for non-deterministic calls a fused family serves, else the "
    "separate pass") {
  const std::array<Operation, 3> fused = {Operation::kBackwardPrep, Operation::kBackwardFused,
                                          Operation::kBackwardDqConvert};
  const std::array<Operation, 3> separate = {Operation::kBackwardPrep, Operation::kBackward,
                                             Operation::kBackwardDq};
  const unsigned no_tma = kAllCallTraits & ~kCallTmaStrides;
  BackwardParams p = valid_params();
  p.seqlen_kv = 4096;  // long enough for the fused kernel under every mask (the length rule is below)
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (std::int64_t head_dim : {64, 96, 128}) {
      INFO(to_string(dtype) << " d=" << head_dim);
      p.dtype = dtype, p.head_dim = head_dim, p.deterministic = false;
      CHECK(backward_operations(p, "sm_90a") == fused);
      CHECK(backward_operations(p, "sm_90a", no_tma) == separate);  // strides no TMA map describes
      for (const char* arch : {"sm_80", "sm_90", ""}) CHECK(backward_operations(p, arch) == separate);
      p.deterministic = true;  // same bits every run: no atomics
      CHECK(backward_operations(p, "sm_90a") == separate);
    }
  p.dtype = DType::kBFloat16, p.deterministic = false;
  p.head_dim = 256;  // bwd-wgmma-split; no Hopper main kernel of the two-kernel pipeline: at every length
  for (std::int64_t keys : {1, 512, 4096}) {
    p.seqlen_kv = keys;
    CHECK(backward_operations(p, "sm_90a") == fused);
  }
  CHECK(backward_operations(p, "sm_90a", no_tma) == separate);
  p.deterministic = true;
  CHECK(backward_operations(p, "sm_90a") == separate);
  p.deterministic = false;
  p.head_dim = 192;
  CHECK(backward_operations(p, "sm_90a") == separate);
  p.head_dim = 32;
  CHECK(backward_operations(p, "sm_90a") == separate);
  p.head_dim = 64, p.dtype = DType::kFloat32;
  CHECK(backward_operations(p, "sm_90a") == separate);

  // An explicit config is the main kernel's: a tile the fused family does not take runs the separate pass.
  p.dtype = DType::kBFloat16;
  p.config = TileConfig{112, 128, 12, 2};  // bwd-wgmma's d=64 default
  CHECK(backward_operations(p, "sm_90a") == separate);
  p.config = TileConfig{64, 128, 12, 3};
  CHECK(backward_operations(p, "sm_90a") == fused);
  p.head_dim = 128;  // three stages exceed the fused kernel's shared memory at d=128
  CHECK(backward_operations(p, "sm_90a") == separate);
  p.head_dim = 64, p.deterministic = true;
  CHECK(backward_operations(p, "sm_90a") == separate);

  // Without a config, the fused kernel from 2048 keys (4096 under a causal mask); an unknown length (0) is long.
  p.deterministic = false, p.config.reset();
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
    INFO(to_string(mask));
    p.mask = mask;
    const std::int64_t min_keys = mask == MaskKind::kNone ? 2048 : 4096;
    p.seqlen_kv = min_keys;
    CHECK(backward_operations(p, "sm_90a") == fused);
    p.seqlen_kv = min_keys - 1;
    CHECK(backward_operations(p, "sm_90a") == separate);
    p.config = TileConfig{64, 128, 12, 2};  // an explicit fused tile at any length
    CHECK(backward_operations(p, "sm_90a") == fused);
    p.config.reset();
    p.seqlen_kv = 0;
    CHECK(backward_operations(p, "sm_90a") == fused);
  }
}

TEST_CASE("the fused kernel takes the call's config as its tile; on sm_90a its default is 64x128x12x2") {
  BackwardParams p = valid_params();
  CHECK(explicit_tile(p, Operation::kBackwardFused) == &p.config);
  CHECK(explicit_tile(p, Operation::kBackwardDqConvert) == nullptr);
  const DeviceTarget hopper = assumed_device_target("", "sm_90a");
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (std::int64_t head_dim : {64, 96, 128})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
        INFO(to_string(dtype) << " d=" << head_dim << " " << to_string(mask));
        p.dtype = dtype, p.head_dim = head_dim, p.mask = mask;
        const ConfigResolution r = resolve_config(config_query(p, Operation::kBackwardFused), hopper);
        CHECK(r.family->name == "bwd-wgmma-fused");
        CHECK(r.source == ConfigSource::kDefault);
        CHECK(r.config == TileConfig{64, 128, 12, 2});
      }
  p.dtype = DType::kBFloat16, p.head_dim = 64, p.mask = MaskKind::kNone;
  p.config = TileConfig{64, 128, 12, 3};
  const ConfigQuery q = config_query(p, Operation::kBackwardFused);
  CHECK(q.explicit_config == p.config);
  const ConfigResolution r = resolve_config(q, hopper);
  CHECK(r.family->name == "bwd-wgmma-fused");
  CHECK(r.source == ConfigSource::kExplicit);
  CHECK(r.config == *p.config);
  // d = 256: bwd-wgmma-split's one tile, Q double-buffered; its single-buffered tile is a valid config, which
  // a deterministic call (the two-kernel pipeline) refuses.
  p.head_dim = 256;
  p.config.reset();
  const ConfigResolution split = resolve_config(config_query(p, Operation::kBackwardFused), hopper);
  CHECK(split.family->name == "bwd-wgmma-split");
  CHECK(split.config == TileConfig{64, 64, 12, 2});
  p.config = TileConfig{64, 64, 12, 1};
  CHECK_NOTHROW(validate_backward(p));
  p.deterministic = true;
  CHECK_THROWS_AS(validate_backward(p), Error);
  p.deterministic = false;
  p.config = TileConfig{64, 64, 12, 3};
  CHECK_THROWS_AS(validate_backward(p), Error);
  p.head_dim = 64;
  // No fused family runs on sm_80.
  p.config.reset();
  CHECK_THROWS_AS(resolve_config(config_query(p, Operation::kBackwardFused), no_device_target()), Error);
}

TEST_CASE("FLASHRTC_CONFIG names a forward tile: the backward's kernels keep their own") {
  RuntimeConfig config = runtime_config();
  config.config_override = "block_m=128,block_n=96";
  const test::ConfigOverride scoped(config);
  ConfigQuery q;
  q.dtype = DType::kBFloat16, q.head_dim = 64;
  CHECK(resolve_config(q, no_device_target()).config.block_n == 96);
  for (Operation op : {Operation::kBackward, Operation::kBackwardPrep, Operation::kBackwardDq,
                       Operation::kBackwardDqConvert}) {
    q.operation = op;
    const ConfigResolution r = resolve_config(q, no_device_target());
    CHECK(r.source == ConfigSource::kDefault);
    CHECK(r.config == r.family->default_config(DType::kBFloat16, 64, MaskKind::kNone, kSmemBytesSm80));
  }
  q.operation = Operation::kBackwardFused;  // on sm_90a, where it runs
  const ConfigResolution fused = resolve_config(q, assumed_device_target("", "sm_90a"));
  CHECK(fused.source == ConfigSource::kDefault);
  CHECK(fused.config == TileConfig{64, 128, 12, 2});
}

// The Python helper binds this struct with ctypes: a change here must change it too.
TEST_CASE("C API: flashrtc_backward_params layout and defaults") {
  CHECK(sizeof(flashrtc_backward_params) == 480);
  CHECK(FLASHRTC_BACKWARD_PARAMS_MIN_SIZE == 424);
  CHECK(offsetof(flashrtc_backward_params, variants) == 424);  // the first layout (the binding's) ends here
  CHECK(offsetof(flashrtc_backward_params, d_sinks) == 472);
  CHECK(offsetof(flashrtc_backward_params, struct_size) == 0);
  CHECK(offsetof(flashrtc_backward_params, q) == 56);
  CHECK(offsetof(flashrtc_backward_params, d_o) == 216);
  CHECK(offsetof(flashrtc_backward_params, lse) == 256);
  CHECK(offsetof(flashrtc_backward_params, d_q) == 264);
  CHECK(offsetof(flashrtc_backward_params, softmax_scale) == 384);
  CHECK(offsetof(flashrtc_backward_params, deterministic) == 396);
  CHECK(offsetof(flashrtc_backward_params, block_m) == 400);
  CHECK(offsetof(flashrtc_backward_params, stream) == 416);

  flashrtc_backward_params p;
  std::memset(&p, 0xAB, sizeof p);
  flashrtc_backward_params_init(&p);
  CHECK(p.struct_size == sizeof p);
  CHECK(p.dtype == 0);
  CHECK(p.lse == nullptr);
  CHECK(p.deterministic == 0);
  for (const flashrtc_tensor* t : {&p.q, &p.k, &p.v, &p.o, &p.d_o, &p.d_q, &p.d_k, &p.d_v}) {
    CHECK(t->data == nullptr);
    CHECK(t->stride_dim == 1);
  }
}

TEST_CASE("C API: flashrtc_attention_backward reads the struct by its size and reports errors") {
  flashrtc_backward_params p = valid_c_params();
  CHECK(flashrtc_attention_backward(&p) == past_validation());

  CHECK(flashrtc_attention_backward(nullptr) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "params is null"));

  p.struct_size = 16;
  CHECK(flashrtc_attention_backward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "flashrtc_backward_params_init"));

  // A newer caller's struct: unknown fields at zero are accepted, a set one is refused.
  struct Newer {
    flashrtc_backward_params known;
    std::int64_t later_field;
  } newer{};
  flashrtc_backward_params_init_sized(&newer.known, sizeof newer);
  CHECK(newer.known.struct_size == sizeof newer);
  CHECK(newer.later_field == 0);
  const flashrtc_backward_params fields = valid_c_params();
  std::memcpy(reinterpret_cast<unsigned char*>(&newer.known) + sizeof(std::uint32_t),
              reinterpret_cast<const unsigned char*>(&fields) + sizeof(std::uint32_t),
              sizeof fields - sizeof(std::uint32_t));
  CHECK(flashrtc_attention_backward(&newer.known) == past_validation());
  newer.later_field = 1;
  CHECK(flashrtc_attention_backward(&newer.known) == FLASHRTC_ERROR_UNSUPPORTED);

  p = valid_c_params();
  p.lse = nullptr;
  CHECK(flashrtc_attention_backward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "lse is null"));

  p = valid_c_params();
  p.d_k.stride_dim = 2;
  CHECK(flashrtc_attention_backward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "d_k.stride_dim"));

  p = valid_c_params();
  p.deterministic = 2;
  CHECK(flashrtc_attention_backward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "deterministic=2"));

  p = valid_c_params();
  p.softmax_scale = 0.5f;  // without has_softmax_scale
  CHECK(flashrtc_attention_backward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "has_softmax_scale=0"));
  p.has_softmax_scale = 1;
  CHECK(flashrtc_attention_backward(&p) == past_validation());

  p = valid_c_params();
  p.block_m = 64;  // a partial tile
  CHECK(flashrtc_attention_backward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "give all four"));
}

TEST_CASE("backward variants: invalid values and d_sinks throw kInvalidArgument, valid ones kUnsupported") {
  const auto validate = [](const BackwardParams& p) { validate_backward(p); };
  const auto run = [](const BackwardParams& p) { attention_backward(p); };
  test::check_variant_cases(valid_params(), validate);
  test::check_variant_cases(valid_params(), run);
  test::check_sink_gradient_cases(valid_params(), validate);
  test::check_sink_gradient_cases(valid_params(), run);
}

TEST_CASE("C API: the backward's variants and d_sinks are checked, and refused until served") {
  const auto call = [](const flashrtc_backward_params& p) { return flashrtc_attention_backward(&p); };
  test::check_c_variant_cases(valid_c_params(), call);
  test::check_c_sink_gradient_cases(valid_c_params(), call);
}

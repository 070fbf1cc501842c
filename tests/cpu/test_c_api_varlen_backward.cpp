// The C API's variable-length backward (flashrtc_varlen_backward_params): its layout, defaults, struct_size
// rules and how argument errors come through. Pointers are fake (never dereferenced: calls stop at validation
// or at NoDevice).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpu/helpers/variant_cases.hpp"
#include "flashrtc/c_api.h"
#include "flashrtc/device.hpp"

namespace {

const void* fake_pointer(std::uintptr_t address) {
  return reinterpret_cast<const void*>(address);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A packed [total, heads, d] tensor (stride_batch unused).
flashrtc_tensor packed(std::uintptr_t address, std::int64_t heads, std::int64_t head_dim) {
  return {fake_pointer(address), 0, heads * head_dim, head_dim, 1};
}

// A valid bf16 call: 3 sequences, 40 packed queries, 50 packed keys, Hq=4, Hkv=2, d=64.
flashrtc_varlen_backward_params valid_params() {
  flashrtc_varlen_backward_params p;
  flashrtc_varlen_backward_params_init(&p);
  p.dtype = FLASHRTC_BFLOAT16;
  p.batch = 3;
  p.total_q = 40;
  p.total_k = 50;
  p.max_seqlen_q = 20;
  p.max_seqlen_k = 30;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 64;
  p.q = packed(0x100000, 4, 64);
  p.k = packed(0x200000, 2, 64);
  p.v = packed(0x300000, 2, 64);
  p.o = packed(0x400000, 4, 64);
  p.d_o = packed(0x500000, 4, 64);
  p.lse = static_cast<const float*>(fake_pointer(0x600000));
  p.d_q = packed(0x700000, 4, 64);
  p.d_k = packed(0x800000, 2, 64);
  p.d_v = packed(0x900000, 2, 64);
  p.cu_seqlens_q = static_cast<const std::int32_t*>(fake_pointer(0xA00000));
  p.cu_seqlens_k = static_cast<const std::int32_t*>(fake_pointer(0xA00100));
  return p;
}

flashrtc_status past_validation() {
  return flashrtc::device_available() ? FLASHRTC_OK : FLASHRTC_ERROR_NO_DEVICE;
}

}  // namespace

// The Python binding declares C structs with ctypes: a change of this layout must change it too.
TEST_CASE("C API: flashrtc_varlen_backward_params layout, in the documented field order") {
  using P = flashrtc_varlen_backward_params;
  CHECK(FLASHRTC_VARLEN_BACKWARD_PARAMS_MIN_SIZE == 464);
  CHECK(offsetof(P, variants) == 464);  // the first layout (the binding's) ends where the variants begin
  CHECK(offsetof(P, d_sinks) == 512);
  CHECK(offsetof(P, deterministic) == 520);
  CHECK(sizeof(P) == 528);
  CHECK(offsetof(P, struct_size) == 0);
  CHECK(offsetof(P, dtype) == 4);
  CHECK(offsetof(P, batch) == 8);
  CHECK(offsetof(P, total_q) == 16);
  CHECK(offsetof(P, total_k) == 24);
  CHECK(offsetof(P, max_seqlen_q) == 32);
  CHECK(offsetof(P, max_seqlen_k) == 40);
  CHECK(offsetof(P, heads_q) == 48);
  CHECK(offsetof(P, heads_kv) == 56);
  CHECK(offsetof(P, head_dim) == 64);
  CHECK(offsetof(P, q) == 72);
  CHECK(offsetof(P, k) == 112);
  CHECK(offsetof(P, v) == 152);
  CHECK(offsetof(P, o) == 192);
  CHECK(offsetof(P, d_o) == 232);
  CHECK(offsetof(P, lse) == 272);
  CHECK(offsetof(P, d_q) == 280);
  CHECK(offsetof(P, d_k) == 320);
  CHECK(offsetof(P, d_v) == 360);
  CHECK(offsetof(P, cu_seqlens_q) == 400);
  CHECK(offsetof(P, cu_seqlens_k) == 408);
  CHECK(offsetof(P, seqused_k) == 416);
  CHECK(offsetof(P, softmax_scale) == 424);
  CHECK(offsetof(P, has_softmax_scale) == 428);
  CHECK(offsetof(P, mask) == 432);
  CHECK(offsetof(P, block_m) == 436);
  CHECK(offsetof(P, block_n) == 440);
  CHECK(offsetof(P, warps) == 444);
  CHECK(offsetof(P, stages) == 448);
  CHECK(offsetof(P, stream) == 456);
}

TEST_CASE("C API: flashrtc_varlen_backward_params_init fills defaults and the size") {
  flashrtc_varlen_backward_params p;
  std::memset(&p, 0x5a, sizeof p);
  flashrtc_varlen_backward_params_init(&p);
  CHECK(p.struct_size == sizeof p);
  CHECK(p.batch == 0);
  CHECK(p.lse == nullptr);
  CHECK(p.seqused_k == nullptr);
  CHECK(p.has_softmax_scale == 0);
  CHECK(p.block_m == 0);
  CHECK(p.stream == nullptr);
  for (const flashrtc_tensor* t : {&p.q, &p.k, &p.v, &p.o, &p.d_o, &p.d_q, &p.d_k, &p.d_v}) {
    CHECK(t->data == nullptr);
    CHECK(t->stride_dim == 1);
  }
  // A smaller caller's init writes only its bytes.
  unsigned char bytes[sizeof p];
  std::memset(bytes, 0x7f, sizeof bytes);
  flashrtc_varlen_backward_params_init_sized(reinterpret_cast<flashrtc_varlen_backward_params*>(bytes), 64);
  std::uint32_t size = 0;
  std::memcpy(&size, bytes, sizeof size);
  CHECK(size == 64);
  CHECK(bytes[64] == 0x7f);
  CHECK(bytes[63] == 0);
}

TEST_CASE("C API: flashrtc_varlen_backward_params' struct_size: out of range, newer") {
  flashrtc_varlen_backward_params valid = valid_params();
  CHECK(flashrtc_attention_varlen_backward(&valid) == past_validation());
  for (const std::uint32_t size : {0u, 8u, FLASHRTC_VARLEN_BACKWARD_PARAMS_MIN_SIZE - 8u, 4097u}) {
    INFO("struct_size " << size);
    flashrtc_varlen_backward_params p = valid_params();
    p.struct_size = size;
    CHECK(flashrtc_attention_varlen_backward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
    CHECK(contains(flashrtc_last_error(), "struct_size=" + std::to_string(size)));
    CHECK(contains(flashrtc_last_error(), "[464, 4096]"));
    CHECK(contains(flashrtc_last_error(), "flashrtc_varlen_backward_params_init"));
  }
  struct Newer {
    flashrtc_varlen_backward_params known;
    std::int64_t later_field;
  } newer;
  flashrtc_varlen_backward_params_init_sized(&newer.known, sizeof(newer));
  CHECK(newer.later_field == 0);
  std::memcpy(reinterpret_cast<unsigned char*>(&newer.known) + sizeof(std::uint32_t),
              reinterpret_cast<const unsigned char*>(&valid) + sizeof(std::uint32_t),
              sizeof(valid) - sizeof(std::uint32_t));
  CHECK(flashrtc_attention_varlen_backward(&newer.known) == past_validation());
  newer.later_field = 1;
  CHECK(flashrtc_attention_varlen_backward(&newer.known) == FLASHRTC_ERROR_UNSUPPORTED);
  CHECK(contains(flashrtc_last_error(), "byte 528 is set"));
}

TEST_CASE("C API: flashrtc_attention_varlen_backward refuses invalid calls, saying why") {
  CHECK(flashrtc_attention_varlen_backward(nullptr) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  struct Case {
    const char* what;
    std::function<void(flashrtc_varlen_backward_params&)> spoil;
    flashrtc_status status;
    std::vector<std::string> names;
  };
  const std::vector<Case> cases = {
      {"null lse",
       [](flashrtc_varlen_backward_params& p) { p.lse = nullptr; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"lse", "null"}},
      {"null d_k",
       [](flashrtc_varlen_backward_params& p) { p.d_k.data = nullptr; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"d_k.data"}},
      {"d_o stride_dim 2",
       [](flashrtc_varlen_backward_params& p) { p.d_o.stride_dim = 2; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"d_o.stride_dim"}},
      {"null cu_seqlens_k",
       [](flashrtc_varlen_backward_params& p) { p.cu_seqlens_k = nullptr; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"cu_seqlens_k"}},
      {"max_seqlen_q past total_q",
       [](flashrtc_varlen_backward_params& p) { p.max_seqlen_q = 41; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"max_seqlen_q"}},
      {"softmax_scale without its flag",
       [](flashrtc_varlen_backward_params& p) { p.softmax_scale = 0.5f; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"has_softmax_scale"}},
      {"has_softmax_scale 2",
       [](flashrtc_varlen_backward_params& p) { p.has_softmax_scale = 2; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"has_softmax_scale"}},
      {"a partial tile",
       [](flashrtc_varlen_backward_params& p) { p.block_m = 64; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"block_m"}},
      {"deterministic 2",
       [](flashrtc_varlen_backward_params& p) { p.deterministic = 2; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"deterministic"}},
      {"dtype 7",
       [](flashrtc_varlen_backward_params& p) { p.dtype = 7; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"dtype"}},
      {"mask 3",
       [](flashrtc_varlen_backward_params& p) { p.mask = 3; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"mask"}},
      {"fp32 (no portable backward family)",
       [](flashrtc_varlen_backward_params& p) { p.dtype = FLASHRTC_FLOAT32; },
       flashrtc::device_available() ? FLASHRTC_ERROR_UNSUPPORTED : FLASHRTC_ERROR_NO_DEVICE,
       {}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    flashrtc_varlen_backward_params p = valid_params();
    c.spoil(p);
    CHECK(flashrtc_attention_varlen_backward(&p) == c.status);
    const std::string message = flashrtc_last_error();
    INFO("message: " << message);
    for (const std::string& name : c.names) CHECK(contains(message, name));
  }
  // A scale with its flag is taken (any finite value), and the call reaches the device.
  flashrtc_varlen_backward_params scaled = valid_params();
  scaled.has_softmax_scale = 1;
  scaled.softmax_scale = -0.25f;
  CHECK(flashrtc_attention_varlen_backward(&scaled) == past_validation());
}

TEST_CASE("C API: the varlen backward's variants and d_sinks are checked, and refused until served") {
  const auto call = [](const flashrtc_varlen_backward_params& p) {
    return flashrtc_attention_varlen_backward(&p);
  };
  flashrtc::test::check_c_variant_cases(valid_params(), call);
  flashrtc::test::check_c_sink_gradient_cases(valid_params(), call);
}

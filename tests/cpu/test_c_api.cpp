// The C API (flashrtc/c_api.h): the params struct's layout and size rules, its defaults, and how errors and
// scales come through. Pointers are fake (never dereferenced: calls stop at validation or at NoDevice).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
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

flashrtc_tensor bnhd(std::uintptr_t address, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim) {
  return {fake_pointer(address), seqlen * heads * head_dim, heads * head_dim, head_dim, 1};
}

// A valid fp16 call: B=2, Nq=17, Nk=33, Hq=4, Hkv=2 (GQA), d=64, contiguous [B, N, H, d].
flashrtc_forward_params valid_c_params() {
  flashrtc_forward_params p;
  flashrtc_forward_params_init(&p);
  p.dtype = FLASHRTC_FLOAT16;
  p.batch = 2;
  p.seqlen_q = 17;
  p.seqlen_kv = 33;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 64;
  p.q = bnhd(0x100000, 17, 4, 64);
  p.k = bnhd(0x200000, 33, 2, 64);
  p.v = bnhd(0x300000, 33, 2, 64);
  p.o = bnhd(0x400000, 17, 4, 64);
  return p;
}

// What a valid call returns on this machine once past validation.
flashrtc_status past_validation() {
  return flashrtc::device_available() ? FLASHRTC_OK : FLASHRTC_ERROR_NO_DEVICE;
}

// A caller built against a newer header: our struct followed by fields this library does not know.
struct NewerParams {
  flashrtc_forward_params known;
  std::int64_t later_field;
};

}  // namespace

// The Python binding (python/flashrtc/_library.py) declares this struct with ctypes and its tests pin the
// same numbers: a change here must change both.
TEST_CASE("C API: flashrtc_forward_params layout") {
  CHECK(sizeof(flashrtc_tensor) == 40);
  // The first layout (the binding's) ends at MIN_SIZE, where the variants begin.
  CHECK(sizeof(flashrtc_forward_params) == 312);
  CHECK(FLASHRTC_FORWARD_PARAMS_MIN_SIZE == 264);
  CHECK(offsetof(flashrtc_forward_params, variants) == 264);
  CHECK(sizeof(flashrtc_variants) == 48);
  CHECK(offsetof(flashrtc_forward_params, struct_size) == 0);
  CHECK(offsetof(flashrtc_forward_params, dtype) == 4);
  CHECK(offsetof(flashrtc_forward_params, batch) == 8);
  CHECK(offsetof(flashrtc_forward_params, head_dim) == 48);
  CHECK(offsetof(flashrtc_forward_params, q) == 56);
  CHECK(offsetof(flashrtc_forward_params, o) == 176);
  CHECK(offsetof(flashrtc_forward_params, lse) == 216);
  CHECK(offsetof(flashrtc_forward_params, softmax_scale) == 224);
  CHECK(offsetof(flashrtc_forward_params, has_softmax_scale) == 228);
  CHECK(offsetof(flashrtc_forward_params, mask) == 232);
  CHECK(offsetof(flashrtc_forward_params, block_m) == 236);
  CHECK(offsetof(flashrtc_forward_params, stages) == 248);
  CHECK(offsetof(flashrtc_forward_params, stream) == 256);
}

TEST_CASE("C API: flashrtc_forward_params_init fills defaults and the size") {
  flashrtc_forward_params p;
  std::memset(&p, 0x7f, sizeof(p));
  flashrtc_forward_params_init(&p);
  CHECK(p.struct_size == sizeof(flashrtc_forward_params));
  CHECK(p.q.stride_dim == 1);
  CHECK(p.k.stride_dim == 1);
  CHECK(p.v.stride_dim == 1);
  CHECK(p.o.stride_dim == 1);
  CHECK(p.q.data == nullptr);
  CHECK(p.lse == nullptr);
  CHECK(p.softmax_scale == 0.f);
  CHECK(p.has_softmax_scale == 0);
  CHECK(p.mask == FLASHRTC_MASK_NONE);
  CHECK(p.block_m == 0);
  CHECK(p.block_n == 0);
  CHECK(p.warps == 0);
  CHECK(p.stages == 0);
  CHECK(p.stream == nullptr);
  flashrtc_forward_params_init(nullptr);  // must not crash

  SUBCASE("a newer caller's larger struct: the tail is zeroed, the size is the caller's") {
    NewerParams newer;
    std::memset(&newer, 0x7f, sizeof(newer));
    flashrtc_forward_params_init_sized(&newer.known, sizeof(newer));
    CHECK(newer.known.struct_size == sizeof(newer));
    CHECK(newer.known.q.stride_dim == 1);
    CHECK(newer.later_field == 0);
  }
  SUBCASE("a size too small for the struct writes only that many bytes") {
    unsigned char bytes[sizeof(flashrtc_forward_params)];
    std::memset(bytes, 0x7f, sizeof(bytes));
    flashrtc_forward_params_init_sized(reinterpret_cast<flashrtc_forward_params*>(bytes), 8);
    std::uint32_t size = 0;
    std::memcpy(&size, bytes, sizeof size);
    CHECK(size == 8);
    CHECK(bytes[8] == 0x7f);
  }
  SUBCASE("a size above the maximum writes only the size, which the call refuses") {
    flashrtc_forward_params p = valid_c_params();
    flashrtc_forward_params_init_sized(&p, FLASHRTC_FORWARD_PARAMS_MAX_SIZE + 1);
    CHECK(p.struct_size == FLASHRTC_FORWARD_PARAMS_MAX_SIZE + 1);
    CHECK(p.head_dim == 64);
    CHECK(flashrtc_attention_forward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  }
}

TEST_CASE("C API: struct_size outside the accepted range is an invalid argument naming the range") {
  for (const std::uint32_t size : {0u, 1u, 8u, FLASHRTC_FORWARD_PARAMS_MIN_SIZE - 8u,
                                   FLASHRTC_FORWARD_PARAMS_MAX_SIZE + 1u, 0xFFFFFFFFu}) {
    INFO("struct_size " << size);
    flashrtc_forward_params p = valid_c_params();
    p.struct_size = size;
    CHECK(flashrtc_attention_forward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
    const std::string message = flashrtc_last_error();
    INFO("last error: " << message);
    CHECK(contains(message, "struct_size=" + std::to_string(size)));
    CHECK(contains(message, "[264, 4096]"));
    CHECK(flashrtc_attention_forward_with_scale(&p, 0.5f) == FLASHRTC_ERROR_INVALID_ARGUMENT);
    CHECK(contains(flashrtc_last_error(), "struct_size"));
  }
}

TEST_CASE("C API: a newer caller's struct is read up to what this library knows") {
  NewerParams newer;
  flashrtc_forward_params_init_sized(&newer.known, sizeof(newer));
  const flashrtc_forward_params valid = valid_c_params();
  std::memcpy(reinterpret_cast<unsigned char*>(&newer.known) + sizeof(std::uint32_t),
              reinterpret_cast<const unsigned char*>(&valid) + sizeof(std::uint32_t),
              sizeof(valid) - sizeof(std::uint32_t));
  REQUIRE(newer.known.struct_size == sizeof(newer));

  // Unknown fields at their defaults (zero bytes): the call goes through.
  CHECK(flashrtc_attention_forward(&newer.known) == past_validation());
  // A field this library cannot honour is never ignored silently.
  newer.later_field = 7;
  CHECK(flashrtc_attention_forward(&newer.known) == FLASHRTC_ERROR_UNSUPPORTED);
  const std::string message = flashrtc_last_error();
  INFO("last error: " << message);
  CHECK(contains(message, "byte 312 is set"));
  CHECK(contains(message, "struct size 312"));
  // Validation still reads the known fields of a larger struct.
  newer.later_field = 0;
  newer.known.head_dim = 7;
  CHECK(flashrtc_attention_forward(&newer.known) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "head_dim"));
}

TEST_CASE("C API: invalid calls return FLASHRTC_ERROR_INVALID_ARGUMENT and say why") {
  CHECK(flashrtc_attention_forward(nullptr) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "null"));
  CHECK(std::string(flashrtc_status_name(FLASHRTC_ERROR_INVALID_ARGUMENT)) == "InvalidArgument");
  CHECK(std::string(flashrtc_status_name(FLASHRTC_ERROR_NO_DEVICE)) == "NoDevice");
  CHECK(std::string(flashrtc_status_name(FLASHRTC_OK)) == "OK");

  struct Case {
    const char* what;
    std::function<void(flashrtc_forward_params&)> mutate;
    const char* names;
  };
  const Case cases[] = {
      {"head_dim 7", [](flashrtc_forward_params& p) { p.head_dim = 7; }, "head_dim"},
      {"head_dim 264", [](flashrtc_forward_params& p) { p.head_dim = 264; }, "head_dim"},
      {"null q", [](flashrtc_forward_params& p) { p.q.data = nullptr; }, "q.data"},
      {"misaligned v", [](flashrtc_forward_params& p) { p.v.data = fake_pointer(0x300008); }, "v.data"},
      {"k stride_dim 2", [](flashrtc_forward_params& p) { p.k.stride_dim = 2; }, "k.stride_dim"},
      {"dtype 9", [](flashrtc_forward_params& p) { p.dtype = 9; }, "dtype"},
      {"mask 5", [](flashrtc_forward_params& p) { p.mask = 5; }, "mask"},
      {"batch 0", [](flashrtc_forward_params& p) { p.batch = 0; }, "batch"},
      {"heads_q 3 with heads_kv 2", [](flashrtc_forward_params& p) { p.heads_q = 3; }, "heads_q"},
      {"softmax_scale +inf",
       [](flashrtc_forward_params& p) { p.has_softmax_scale = 1, p.softmax_scale = INFINITY; },
       "softmax_scale"},
      {"softmax_scale -inf",
       [](flashrtc_forward_params& p) { p.has_softmax_scale = 1, p.softmax_scale = -INFINITY; },
       "softmax_scale"},
      {"softmax_scale NaN",
       [](flashrtc_forward_params& p) { p.has_softmax_scale = 1, p.softmax_scale = NAN; }, "softmax_scale"},
      {"a scale without its flag", [](flashrtc_forward_params& p) { p.softmax_scale = 0.125f; },
       "has_softmax_scale=0"},
      {"NaN without the flag", [](flashrtc_forward_params& p) { p.softmax_scale = NAN; },
       "has_softmax_scale=0"},
      {"has_softmax_scale 2", [](flashrtc_forward_params& p) { p.has_softmax_scale = 2; },
       "has_softmax_scale=2"},
      {"only block_m given", [](flashrtc_forward_params& p) { p.block_m = 64; }, "block_m"},
      {"negative warps",
       [](flashrtc_forward_params& p) { p.block_m = 64, p.block_n = 64, p.warps = -4, p.stages = 1; },
       "warps"},
      {"tile block_n 12",
       [](flashrtc_forward_params& p) { p.block_m = 64, p.block_n = 12, p.warps = 4, p.stages = 1; },
       "block_n"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    flashrtc_forward_params p = valid_c_params();
    c.mutate(p);
    CHECK(flashrtc_attention_forward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
    const std::string message = flashrtc_last_error();
    INFO("last error: " << message);
    CHECK(contains(message, c.names));
  }

  // The message is per thread: another thread has its own (empty) one.
  std::string other_thread;
  std::thread([&] { other_thread = flashrtc_last_error(); }).join();
  CHECK(other_thread.empty());
  CHECK_FALSE(std::string(flashrtc_last_error()).empty());
}

TEST_CASE("C API: any finite scale is expressible in the struct") {
  if (flashrtc::device_available()) {
    MESSAGE("a device is present; the no-device path is not testable here");
    return;
  }
  flashrtc_forward_params p = valid_c_params();
  CHECK(flashrtc_attention_forward(&p) == FLASHRTC_ERROR_NO_DEVICE);  // the default scale
  CHECK(contains(flashrtc_last_error(), "NoDevice"));
  for (const float scale : {0.f, -0.125f, 3.f}) {
    INFO("scale " << scale);
    p.has_softmax_scale = 1;
    p.softmax_scale = scale;
    CHECK(flashrtc_attention_forward(&p) == FLASHRTC_ERROR_NO_DEVICE);
  }
  p.block_m = 64, p.block_n = 32, p.warps = 4, p.stages = 1;  // an explicit valid tile changes nothing
  CHECK(flashrtc_attention_forward(&p) == FLASHRTC_ERROR_NO_DEVICE);
}

TEST_CASE("C API: flashrtc_attention_forward_with_scale takes the scale as given") {
  CHECK(flashrtc_attention_forward_with_scale(nullptr, 0.5f) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "null"));
  for (const float scale : {INFINITY, -INFINITY, std::nanf("")}) {
    INFO("scale " << scale);
    const flashrtc_forward_params p = valid_c_params();
    CHECK(flashrtc_attention_forward_with_scale(&p, scale) == FLASHRTC_ERROR_INVALID_ARGUMENT);
    CHECK(contains(flashrtc_last_error(), "softmax_scale"));
  }
  flashrtc_forward_params partial_tile = valid_c_params();
  partial_tile.block_m = 64;
  CHECK(flashrtc_attention_forward_with_scale(&partial_tile, 1.f) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "block_m"));

  if (flashrtc::device_available()) {
    MESSAGE("a device is present; the no-device path of valid scales is not testable here");
    return;
  }
  // The argument wins over the struct's scale fields, even a value the plain entry point rejects.
  for (const float scale : {0.f, -0.125f, 3.f}) {
    INFO("scale " << scale);
    flashrtc_forward_params p = valid_c_params();
    p.softmax_scale = INFINITY;
    CHECK(flashrtc_attention_forward_with_scale(&p, scale) == FLASHRTC_ERROR_NO_DEVICE);
    CHECK(contains(flashrtc_last_error(), "NoDevice"));
  }
}

namespace {

const std::int32_t* fake_int32(std::uintptr_t address) {
  return reinterpret_cast<const std::int32_t*>(address);
}

// A valid fp16 decode call: B=2, Nq=1, Hq=8, Hkv=2 (GQA), d=64, a contiguous cache of 2 pages x 128 tokens,
// one new token appended at cache_seqlens.
flashrtc_kvcache_params valid_kvcache_params() {
  flashrtc_kvcache_params p;
  flashrtc_kvcache_params_init(&p);
  p.dtype = FLASHRTC_FLOAT16;
  p.batch = 2;
  p.seqlen_q = 1;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 64;
  p.q = bnhd(0x100000, 1, 8, 64);
  p.k_cache = bnhd(0x200000, 128, 2, 64);
  p.v_cache = bnhd(0x300000, 128, 2, 64);
  p.num_pages = 2;
  p.page_size = 128;
  p.cache_seqlens = fake_int32(0x500000);
  p.k_new = bnhd(0x600000, 1, 2, 64);
  p.v_new = bnhd(0x700000, 1, 2, 64);
  p.seqlen_new = 1;
  p.o = bnhd(0x400000, 1, 8, 64);
  return p;
}

// merge_states of two fp32 [2, 3, 4, 64] states.
flashrtc_merge_states_params valid_merge_params() {
  flashrtc_merge_states_params p;
  flashrtc_merge_states_params_init(&p);
  p.dtype = FLASHRTC_FLOAT32;
  p.batch = 2;
  p.seqlen = 3;
  p.heads = 4;
  p.head_dim = 64;
  p.o_a = bnhd(0x100000, 3, 4, 64);
  p.o_b = bnhd(0x200000, 3, 4, 64);
  p.lse_a = reinterpret_cast<const float*>(0x300000);
  p.lse_b = reinterpret_cast<const float*>(0x400000);
  p.o = bnhd(0x500000, 3, 4, 64);
  return p;
}

}  // namespace

// python/flashrtc/_library.py declares these structs with ctypes and python/tests/test_kvcache_cpu.py pins
// the same numbers: a change here must change both.
TEST_CASE("C API: flashrtc_kvcache_params and flashrtc_merge_states_params layout") {
  CHECK(sizeof(flashrtc_kvcache_params) == 448);
  CHECK(FLASHRTC_KVCACHE_PARAMS_MIN_SIZE == 400);
  CHECK(offsetof(flashrtc_kvcache_params, variants) == 400);
  CHECK(offsetof(flashrtc_kvcache_params, q) == 48);
  CHECK(offsetof(flashrtc_kvcache_params, num_pages) == 168);
  CHECK(offsetof(flashrtc_kvcache_params, block_table) == 184);
  CHECK(offsetof(flashrtc_kvcache_params, cache_seqlens) == 208);
  CHECK(offsetof(flashrtc_kvcache_params, k_new) == 224);
  CHECK(offsetof(flashrtc_kvcache_params, seqlen_new) == 304);
  CHECK(offsetof(flashrtc_kvcache_params, o) == 312);
  CHECK(offsetof(flashrtc_kvcache_params, lse) == 352);
  CHECK(offsetof(flashrtc_kvcache_params, softmax_scale) == 360);
  CHECK(offsetof(flashrtc_kvcache_params, mask) == 368);
  CHECK(offsetof(flashrtc_kvcache_params, num_splits) == 372);
  CHECK(offsetof(flashrtc_kvcache_params, block_m) == 376);
  CHECK(offsetof(flashrtc_kvcache_params, stream) == 392);
  CHECK(sizeof(flashrtc_merge_states_params) == 192);
  CHECK(FLASHRTC_MERGE_STATES_PARAMS_MIN_SIZE == 192);
  CHECK(offsetof(flashrtc_merge_states_params, o_a) == 40);
  CHECK(offsetof(flashrtc_merge_states_params, lse_a) == 120);
  CHECK(offsetof(flashrtc_merge_states_params, o) == 136);
  CHECK(offsetof(flashrtc_merge_states_params, lse) == 176);
  CHECK(offsetof(flashrtc_merge_states_params, stream) == 184);
}

TEST_CASE("C API: the KV-cache and merge_states params' init fills defaults and the size") {
  flashrtc_kvcache_params p;
  std::memset(&p, 0x7f, sizeof(p));
  flashrtc_kvcache_params_init(&p);
  CHECK(p.struct_size == sizeof(flashrtc_kvcache_params));
  for (const flashrtc_tensor* t : {&p.q, &p.k_cache, &p.v_cache, &p.k_new, &p.v_new, &p.o}) {
    CHECK(t->stride_dim == 1);
    CHECK(t->data == nullptr);
  }
  CHECK(p.block_table == nullptr);
  CHECK(p.cache_seqlens == nullptr);
  CHECK(p.cache_batch_idx == nullptr);
  CHECK(p.lse == nullptr);
  CHECK(p.has_softmax_scale == 0);
  CHECK(p.softmax_scale == 0.f);
  CHECK(p.mask == FLASHRTC_MASK_NONE);
  CHECK(p.num_splits == 0);
  CHECK(p.block_m == 0);
  CHECK(p.stages == 0);
  CHECK(p.stream == nullptr);
  flashrtc_kvcache_params_init(nullptr);  // must not crash

  flashrtc_merge_states_params m;
  std::memset(&m, 0x7f, sizeof(m));
  flashrtc_merge_states_params_init(&m);
  CHECK(m.struct_size == sizeof(flashrtc_merge_states_params));
  CHECK(m.o_a.stride_dim == 1);
  CHECK(m.o_b.stride_dim == 1);
  CHECK(m.o.stride_dim == 1);
  CHECK(m.lse_a == nullptr);
  CHECK(m.lse == nullptr);
  CHECK(m.stream == nullptr);
  flashrtc_merge_states_params_init(nullptr);
}

TEST_CASE("C API: the KV-cache and merge_states structs' sizes: older, out of range, newer") {
  SUBCASE("a struct_size out of range is an invalid argument naming the range") {
    for (const std::uint32_t size : {0u, 8u, FLASHRTC_KVCACHE_PARAMS_MIN_SIZE - 8u, 4097u}) {
      INFO("struct_size " << size);
      flashrtc_kvcache_params p = valid_kvcache_params();
      p.struct_size = size;
      CHECK(flashrtc_attention_with_kvcache(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
      CHECK(contains(flashrtc_last_error(), "struct_size=" + std::to_string(size)));
      CHECK(contains(flashrtc_last_error(), "[400, 4096]"));
    }
    for (const std::uint32_t size : {0u, 8u, FLASHRTC_MERGE_STATES_PARAMS_MIN_SIZE - 8u, 4097u}) {
      INFO("struct_size " << size);
      flashrtc_merge_states_params m = valid_merge_params();
      m.struct_size = size;
      CHECK(flashrtc_merge_states(&m) == FLASHRTC_ERROR_INVALID_ARGUMENT);
      CHECK(contains(flashrtc_last_error(), "[192, 4096]"));
    }
  }
  SUBCASE("a smaller caller's init writes only its bytes") {
    unsigned char bytes[sizeof(flashrtc_kvcache_params)];
    std::memset(bytes, 0x7f, sizeof(bytes));
    flashrtc_kvcache_params_init_sized(reinterpret_cast<flashrtc_kvcache_params*>(bytes), 64);
    std::uint32_t size = 0;
    std::memcpy(&size, bytes, sizeof size);
    CHECK(size == 64);
    CHECK(bytes[64] == 0x7f);
  }
  SUBCASE("a newer caller's struct: known fields read, an unknown set field refused") {
    struct Newer {
      flashrtc_kvcache_params known;
      std::int64_t later_field;
    } newer;
    flashrtc_kvcache_params_init_sized(&newer.known, sizeof(newer));
    CHECK(newer.later_field == 0);
    const flashrtc_kvcache_params valid = valid_kvcache_params();
    std::memcpy(reinterpret_cast<unsigned char*>(&newer.known) + sizeof(std::uint32_t),
                reinterpret_cast<const unsigned char*>(&valid) + sizeof(std::uint32_t),
                sizeof(valid) - sizeof(std::uint32_t));
    CHECK(flashrtc_attention_with_kvcache(&newer.known) == past_validation());
    newer.later_field = 1;
    CHECK(flashrtc_attention_with_kvcache(&newer.known) == FLASHRTC_ERROR_UNSUPPORTED);
    CHECK(contains(flashrtc_last_error(), "byte 448 is set"));
  }
}

TEST_CASE(
    "C API: flashrtc_attention_with_kvcache and flashrtc_merge_states refuse invalid calls, saying why") {
  CHECK(flashrtc_attention_with_kvcache(nullptr) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "null"));
  CHECK(flashrtc_merge_states(nullptr) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "null"));

  // The valid calls get past validation (NoDevice here).
  flashrtc_kvcache_params valid = valid_kvcache_params();
  CHECK(flashrtc_attention_with_kvcache(&valid) == past_validation());
  valid.mask = FLASHRTC_MASK_CAUSAL_BOTTOM_RIGHT, valid.num_splits = 4, valid.has_softmax_scale = 1;
  valid.softmax_scale = -0.5f;
  CHECK(flashrtc_attention_with_kvcache(&valid) == past_validation());
  flashrtc_merge_states_params valid_merge = valid_merge_params();
  CHECK(flashrtc_merge_states(&valid_merge) == past_validation());

  struct Case {
    const char* what;
    std::function<void(flashrtc_kvcache_params&)> mutate;
    const char* names;
  };
  const Case cases[] = {
      {"head_dim 7", [](flashrtc_kvcache_params& p) { p.head_dim = 7; }, "head_dim"},
      {"dtype 9", [](flashrtc_kvcache_params& p) { p.dtype = 9; }, "dtype"},
      {"top-left causal", [](flashrtc_kvcache_params& p) { p.mask = FLASHRTC_MASK_CAUSAL_TOP_LEFT; }, "mask"},
      {"heads_q 3", [](flashrtc_kvcache_params& p) { p.heads_q = 3; }, "heads_q"},
      {"num_splits 257", [](flashrtc_kvcache_params& p) { p.num_splits = 257; }, "num_splits"},
      {"num_splits -1", [](flashrtc_kvcache_params& p) { p.num_splits = -1; }, "num_splits"},
      {"softmax_scale NaN",
       [](flashrtc_kvcache_params& p) { p.has_softmax_scale = 1, p.softmax_scale = NAN; }, "softmax_scale"},
      {"a scale without its flag", [](flashrtc_kvcache_params& p) { p.softmax_scale = 0.5f; },
       "has_softmax_scale=0"},
      {"only block_m given", [](flashrtc_kvcache_params& p) { p.block_m = 16; }, "block_m"},
      {"v_new missing", [](flashrtc_kvcache_params& p) { p.v_new.data = nullptr; }, "v_new"},
      {"append without cache_seqlens", [](flashrtc_kvcache_params& p) { p.cache_seqlens = nullptr; },
       "cache_seqlens"},
      {"paged with page_size 100",
       [](flashrtc_kvcache_params& p) {
         p.block_table = fake_int32(0x800000), p.block_table_stride = 1, p.max_pages_per_seq = 1;
         p.page_size = 100;
       },
       "page_size"},
      {"cache_batch_idx with a block table",
       [](flashrtc_kvcache_params& p) {
         p.block_table = fake_int32(0x800000), p.block_table_stride = 1, p.max_pages_per_seq = 1;
         p.cache_batch_idx = fake_int32(0x900000);
       },
       "cache_batch_idx"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    flashrtc_kvcache_params p = valid_kvcache_params();
    c.mutate(p);
    CHECK(flashrtc_attention_with_kvcache(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
    const std::string message = flashrtc_last_error();
    INFO("last error: " << message);
    CHECK(contains(message, c.names));
  }

  flashrtc_merge_states_params no_lse = valid_merge_params();
  no_lse.lse_b = nullptr;
  CHECK(flashrtc_merge_states(&no_lse) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "lse_b"));
  flashrtc_merge_states_params bad_dim = valid_merge_params();
  bad_dim.head_dim = 12;
  CHECK(flashrtc_merge_states(&bad_dim) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "head_dim"));
}

namespace {

// A valid fp16 varlen call: 3 sequences, 40 packed queries, 50 packed keys, Hq=4, Hkv=2 (GQA), d=64,
// contiguous [total, H, d]; stride_batch set to nonsense, which the call ignores.
flashrtc_varlen_forward_params valid_varlen_params() {
  flashrtc_varlen_forward_params p;
  flashrtc_varlen_forward_params_init(&p);
  p.dtype = FLASHRTC_FLOAT16;
  p.batch = 3;
  p.total_q = 40;
  p.total_k = 50;
  p.max_seqlen_q = 20;
  p.max_seqlen_k = 30;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 64;
  p.q = bnhd(0x100000, 40, 4, 64);
  p.k = bnhd(0x200000, 50, 2, 64);
  p.v = bnhd(0x300000, 50, 2, 64);
  p.o = bnhd(0x400000, 40, 4, 64);
  p.q.stride_batch = 7;
  p.cu_seqlens_q = fake_int32(0x500000);
  p.cu_seqlens_k = fake_int32(0x500100);
  return p;
}

}  // namespace

// python/flashrtc/_library.py declares this struct with ctypes and python/tests/test_varlen_cpu.py pins the
// same numbers: a change here must change both.
TEST_CASE("C API: flashrtc_varlen_forward_params layout") {
  CHECK(sizeof(flashrtc_varlen_forward_params) == 352);
  CHECK(FLASHRTC_VARLEN_FORWARD_PARAMS_MIN_SIZE == 304);
  CHECK(offsetof(flashrtc_varlen_forward_params, variants) == 304);
  CHECK(offsetof(flashrtc_varlen_forward_params, dtype) == 4);
  CHECK(offsetof(flashrtc_varlen_forward_params, batch) == 8);
  CHECK(offsetof(flashrtc_varlen_forward_params, total_q) == 16);
  CHECK(offsetof(flashrtc_varlen_forward_params, total_k) == 24);
  CHECK(offsetof(flashrtc_varlen_forward_params, max_seqlen_q) == 32);
  CHECK(offsetof(flashrtc_varlen_forward_params, max_seqlen_k) == 40);
  CHECK(offsetof(flashrtc_varlen_forward_params, heads_q) == 48);
  CHECK(offsetof(flashrtc_varlen_forward_params, head_dim) == 64);
  CHECK(offsetof(flashrtc_varlen_forward_params, q) == 72);
  CHECK(offsetof(flashrtc_varlen_forward_params, o) == 192);
  CHECK(offsetof(flashrtc_varlen_forward_params, cu_seqlens_q) == 232);
  CHECK(offsetof(flashrtc_varlen_forward_params, cu_seqlens_k) == 240);
  CHECK(offsetof(flashrtc_varlen_forward_params, seqused_k) == 248);
  CHECK(offsetof(flashrtc_varlen_forward_params, lse) == 256);
  CHECK(offsetof(flashrtc_varlen_forward_params, softmax_scale) == 264);
  CHECK(offsetof(flashrtc_varlen_forward_params, has_softmax_scale) == 268);
  CHECK(offsetof(flashrtc_varlen_forward_params, mask) == 272);
  CHECK(offsetof(flashrtc_varlen_forward_params, block_m) == 276);
  CHECK(offsetof(flashrtc_varlen_forward_params, stages) == 288);
  CHECK(offsetof(flashrtc_varlen_forward_params, stream) == 296);
}

TEST_CASE("C API: flashrtc_varlen_forward_params_init fills defaults and the size") {
  flashrtc_varlen_forward_params p;
  std::memset(&p, 0x7f, sizeof(p));
  flashrtc_varlen_forward_params_init(&p);
  CHECK(p.struct_size == sizeof(flashrtc_varlen_forward_params));
  CHECK(p.dtype == FLASHRTC_FLOAT32);
  CHECK(p.batch == 0);
  CHECK(p.total_q == 0);
  CHECK(p.max_seqlen_k == 0);
  for (const flashrtc_tensor* t : {&p.q, &p.k, &p.v, &p.o}) {
    CHECK(t->data == nullptr);
    CHECK(t->stride_seq == 0);
    CHECK(t->stride_dim == 1);
  }
  CHECK(p.cu_seqlens_q == nullptr);
  CHECK(p.cu_seqlens_k == nullptr);
  CHECK(p.seqused_k == nullptr);
  CHECK(p.lse == nullptr);
  CHECK(p.softmax_scale == 0.f);
  CHECK(p.has_softmax_scale == 0);
  CHECK(p.mask == FLASHRTC_MASK_NONE);
  CHECK(p.block_m == 0);
  CHECK(p.block_n == 0);
  CHECK(p.warps == 0);
  CHECK(p.stages == 0);
  CHECK(p.stream == nullptr);
  flashrtc_varlen_forward_params_init(nullptr);  // must not crash

  SUBCASE("a size too small for the struct writes only that many bytes") {
    unsigned char bytes[sizeof(flashrtc_varlen_forward_params)];
    std::memset(bytes, 0x7f, sizeof(bytes));
    flashrtc_varlen_forward_params_init_sized(reinterpret_cast<flashrtc_varlen_forward_params*>(bytes), 16);
    std::uint32_t size = 0;
    std::memcpy(&size, bytes, sizeof size);
    CHECK(size == 16);
    CHECK(bytes[16] == 0x7f);
  }
  SUBCASE("a size above the maximum writes only the size, which the call refuses") {
    flashrtc_varlen_forward_params valid = valid_varlen_params();
    flashrtc_varlen_forward_params_init_sized(&valid, FLASHRTC_VARLEN_FORWARD_PARAMS_MAX_SIZE + 1);
    CHECK(valid.struct_size == FLASHRTC_VARLEN_FORWARD_PARAMS_MAX_SIZE + 1);
    CHECK(valid.head_dim == 64);
    CHECK(flashrtc_attention_varlen_forward(&valid) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  }
}

TEST_CASE("C API: the varlen struct's sizes: older, out of range, newer") {
  for (const std::uint32_t size : {0u, 1u, 8u, FLASHRTC_VARLEN_FORWARD_PARAMS_MIN_SIZE - 8u,
                                   FLASHRTC_VARLEN_FORWARD_PARAMS_MAX_SIZE + 1u, 0xFFFFFFFFu}) {
    INFO("struct_size " << size);
    flashrtc_varlen_forward_params p = valid_varlen_params();
    p.struct_size = size;
    CHECK(flashrtc_attention_varlen_forward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
    const std::string message = flashrtc_last_error();
    INFO("last error: " << message);
    CHECK(contains(message, "struct_size=" + std::to_string(size)));
    CHECK(contains(message, "[304, 4096]"));
    CHECK(contains(message, "flashrtc_varlen_forward_params_init"));
  }

  struct Newer {
    flashrtc_varlen_forward_params known;
    std::int64_t later_field;
  } newer;
  std::memset(&newer, 0x7f, sizeof(newer));
  flashrtc_varlen_forward_params_init_sized(&newer.known, sizeof(newer));
  CHECK(newer.known.struct_size == sizeof(newer));
  CHECK(newer.later_field == 0);
  const flashrtc_varlen_forward_params valid = valid_varlen_params();
  std::memcpy(reinterpret_cast<unsigned char*>(&newer.known) + sizeof(std::uint32_t),
              reinterpret_cast<const unsigned char*>(&valid) + sizeof(std::uint32_t),
              sizeof(valid) - sizeof(std::uint32_t));
  // Unknown fields at their defaults (zero bytes): the call goes through.
  CHECK(flashrtc_attention_varlen_forward(&newer.known) == past_validation());
  // A field this library cannot honour is never ignored silently.
  newer.later_field = 1;
  CHECK(flashrtc_attention_varlen_forward(&newer.known) == FLASHRTC_ERROR_UNSUPPORTED);
  CHECK(contains(flashrtc_last_error(), "byte 352 is set"));
  CHECK(contains(flashrtc_last_error(), "struct size 352"));
  // Validation still reads the known fields of a larger struct.
  newer.later_field = 0;
  newer.known.max_seqlen_q = 0;
  CHECK(flashrtc_attention_varlen_forward(&newer.known) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "max_seqlen_q"));
}

TEST_CASE("C API: flashrtc_attention_varlen_forward refuses invalid calls, saying why") {
  CHECK(flashrtc_attention_varlen_forward(nullptr) == FLASHRTC_ERROR_INVALID_ARGUMENT);
  CHECK(contains(flashrtc_last_error(), "null"));

  // Valid calls get past validation (NoDevice here): every mask, optional fields set, any finite scale.
  for (const std::int32_t mask :
       {FLASHRTC_MASK_NONE, FLASHRTC_MASK_CAUSAL_TOP_LEFT, FLASHRTC_MASK_CAUSAL_BOTTOM_RIGHT}) {
    INFO("mask " << mask);
    flashrtc_varlen_forward_params p = valid_varlen_params();
    p.mask = mask;
    CHECK(flashrtc_attention_varlen_forward(&p) == past_validation());
  }
  flashrtc_varlen_forward_params optional = valid_varlen_params();
  optional.dtype = FLASHRTC_BFLOAT16;
  optional.seqused_k = fake_int32(0x500200);
  optional.lse = reinterpret_cast<float*>(0x600000);
  optional.has_softmax_scale = 1;
  optional.softmax_scale = -0.5f;
  optional.block_m = 64, optional.block_n = 32, optional.warps = 4, optional.stages = 1;
  CHECK(flashrtc_attention_varlen_forward(&optional) == past_validation());

  struct Case {
    const char* what;
    std::function<void(flashrtc_varlen_forward_params&)> mutate;
    const char* names;
  };
  const Case cases[] = {
      {"null cu_seqlens_q", [](flashrtc_varlen_forward_params& p) { p.cu_seqlens_q = nullptr; },
       "cu_seqlens_q"},
      {"null cu_seqlens_k", [](flashrtc_varlen_forward_params& p) { p.cu_seqlens_k = nullptr; },
       "cu_seqlens_k"},
      {"misaligned seqused_k", [](flashrtc_varlen_forward_params& p) { p.seqused_k = fake_int32(0x500202); },
       "seqused_k"},
      {"misaligned lse",
       [](flashrtc_varlen_forward_params& p) { p.lse = reinterpret_cast<float*>(0x600002); }, "lse"},
      {"null o", [](flashrtc_varlen_forward_params& p) { p.o.data = nullptr; }, "o.data"},
      {"k stride_dim 2", [](flashrtc_varlen_forward_params& p) { p.k.stride_dim = 2; }, "k.stride_dim"},
      {"dtype 9", [](flashrtc_varlen_forward_params& p) { p.dtype = 9; }, "dtype"},
      {"mask 5", [](flashrtc_varlen_forward_params& p) { p.mask = 5; }, "mask"},
      {"batch 0", [](flashrtc_varlen_forward_params& p) { p.batch = 0; }, "batch"},
      {"total_q 0", [](flashrtc_varlen_forward_params& p) { p.total_q = 0; }, "total_q"},
      {"max_seqlen_q past total_q", [](flashrtc_varlen_forward_params& p) { p.max_seqlen_q = 41; },
       "max_seqlen_q"},
      {"max_seqlen_k past total_k", [](flashrtc_varlen_forward_params& p) { p.max_seqlen_k = 51; },
       "max_seqlen_k"},
      {"heads_q 3 with heads_kv 2", [](flashrtc_varlen_forward_params& p) { p.heads_q = 3; }, "heads_q"},
      {"head_dim 12", [](flashrtc_varlen_forward_params& p) { p.head_dim = 12; }, "head_dim"},
      {"softmax_scale NaN",
       [](flashrtc_varlen_forward_params& p) { p.has_softmax_scale = 1, p.softmax_scale = NAN; },
       "softmax_scale"},
      {"a scale without its flag", [](flashrtc_varlen_forward_params& p) { p.softmax_scale = 0.125f; },
       "has_softmax_scale=0"},
      {"has_softmax_scale 2", [](flashrtc_varlen_forward_params& p) { p.has_softmax_scale = 2; },
       "has_softmax_scale=2"},
      {"only block_m given", [](flashrtc_varlen_forward_params& p) { p.block_m = 64; }, "block_m"},
      {"tile block_n 12",
       [](flashrtc_varlen_forward_params& p) { p.block_m = 64, p.block_n = 12, p.warps = 4, p.stages = 1; },
       "block_n"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    flashrtc_varlen_forward_params p = valid_varlen_params();
    c.mutate(p);
    CHECK(flashrtc_attention_varlen_forward(&p) == FLASHRTC_ERROR_INVALID_ARGUMENT);
    const std::string message = flashrtc_last_error();
    INFO("last error: " << message);
    CHECK(contains(message, c.names));
  }
}

TEST_CASE(
    "C API: the variants of the forward, KV-cache and varlen calls are checked, and refused until served") {
  // The forward's windows and softcaps are served (test_variants_forward.cpp).
  flashrtc::test::check_c_variant_cases(
      valid_c_params(), [](const flashrtc_forward_params& p) { return flashrtc_attention_forward(&p); },
      flashrtc::kVariantWindow | flashrtc::kVariantSoftcap);
  flashrtc::test::check_c_variant_cases(valid_kvcache_params(), [](const flashrtc_kvcache_params& p) {
    return flashrtc_attention_with_kvcache(&p);
  });
  flashrtc::test::check_c_variant_cases(valid_varlen_params(), [](const flashrtc_varlen_forward_params& p) {
    return flashrtc_attention_varlen_forward(&p);
  });
  flashrtc_forward_params sinks = valid_c_params();
  sinks.variants.sinks = flashrtc::test::fake_floats(0xB00000);
  CHECK(flashrtc_attention_forward(&sinks) == FLASHRTC_ERROR_UNSUPPORTED);
  CHECK(contains(flashrtc_last_error(), "attention sinks"));
  // A caller of the first layout has no variants: the bytes after its struct_size are not read.
  sinks.struct_size = FLASHRTC_FORWARD_PARAMS_MIN_SIZE;
  CHECK(flashrtc_attention_forward(&sinks) == past_validation());
}

// Argument validation of attention_with_kvcache and merge_states: every rule throws kInvalidArgument naming
// the argument, before anything touches a device; the split count's rules; the call's config query. Pointers
// are fake (never dereferenced without a device).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "cpu/helpers/variant_cases.hpp"
#include "flashrtc/attention_kvcache.hpp"
#include "flashrtc/error.hpp"

using namespace flashrtc;

namespace {

template <typename T = void>
T* fake(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// A valid paged call: B=2, Nq=1, Hq=8, Hkv=2, d=128, 16 pages of 16 tokens, 4 pages per sequence (capacity
// 64), one token appended; 16-byte aligned fake pointers.
KvCacheParams valid_paged(DType dtype = DType::kFloat16) {
  KvCacheParams p;
  p.dtype = dtype;
  p.batch = 2;
  p.seqlen_q = 1;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 128;
  p.q = TensorRef::bnhd(fake(0x100000), p.seqlen_q, p.heads_q, p.head_dim);
  p.o = TensorRef::bnhd(fake(0x200000), p.seqlen_q, p.heads_q, p.head_dim);
  p.num_pages = 16;
  p.page_size = 16;
  p.k_cache = TensorRef::bnhd(fake(0x300000), p.page_size, p.heads_kv, p.head_dim);
  p.v_cache = TensorRef::bnhd(fake(0x400000), p.page_size, p.heads_kv, p.head_dim);
  p.block_table = fake<const std::int32_t>(0x500000);
  p.max_pages_per_seq = 4;
  p.block_table_stride = 4;
  p.cache_seqlens = fake<const std::int32_t>(0x600000);
  p.seqlen_new = 1;
  p.k_new = TensorRef::bnhd(fake(0x700000), p.seqlen_new, p.heads_kv, p.head_dim);
  p.v_new = TensorRef::bnhd(fake(0x800000), p.seqlen_new, p.heads_kv, p.head_dim);
  p.lse = fake<float>(0x900000);
  return p;
}

// The same call on a contiguous cache of 3 pages of 100 tokens, sequence b in page cache_batch_idx[b].
KvCacheParams valid_contiguous(DType dtype = DType::kFloat16) {
  KvCacheParams p = valid_paged(dtype);
  p.block_table = nullptr;
  p.max_pages_per_seq = 0;
  p.block_table_stride = 0;
  p.num_pages = 3;
  p.page_size = 100;
  p.k_cache = TensorRef::bnhd(p.k_cache.data, p.page_size, p.heads_kv, p.head_dim);
  p.v_cache = TensorRef::bnhd(p.v_cache.data, p.page_size, p.heads_kv, p.head_dim);
  p.cache_batch_idx = fake<const std::int32_t>(0xA00000);
  return p;
}

struct InvalidCase {
  std::string what;
  std::function<void(KvCacheParams&)> mutate;
  std::vector<std::string> names;  // substrings the message must contain
};

std::vector<InvalidCase> invalid_kvcache_cases() {
  std::vector<InvalidCase> cases;
  auto add = [&](std::string what, std::function<void(KvCacheParams&)> mutate, std::vector<std::string> names) {
    cases.push_back({std::move(what), std::move(mutate), std::move(names)});
  };
  // Pointers.
  add("null q", [](KvCacheParams& p) { p.q.data = nullptr; }, {"q.data", "null"});
  add("null o", [](KvCacheParams& p) { p.o.data = nullptr; }, {"o.data", "null"});
  add("null k_cache", [](KvCacheParams& p) { p.k_cache.data = nullptr; }, {"k_cache.data", "null"});
  add("null v_cache", [](KvCacheParams& p) { p.v_cache.data = nullptr; }, {"v_cache.data", "null"});
  add("q 8-byte aligned", [](KvCacheParams& p) { p.q.data = fake(0x100008); }, {"q.data", "aligned"});
  add("k_cache 2-byte aligned", [](KvCacheParams& p) { p.k_cache.data = fake(0x300002); }, {"k_cache.data", "aligned"});
  add("v_new 4-byte aligned", [](KvCacheParams& p) { p.v_new.data = fake(0x800004); }, {"v_new.data", "aligned"});
  add("o 8-byte aligned", [](KvCacheParams& p) { p.o.data = fake(0x200008); }, {"o.data", "aligned"});
  add("lse 2-byte aligned", [](KvCacheParams& p) { p.lse = fake<float>(0x900002); }, {"lse"});
  add("block_table 2-byte aligned", [](KvCacheParams& p) { p.block_table = fake<const std::int32_t>(0x500002); },
      {"block_table"});
  add("cache_seqlens 1-byte aligned", [](KvCacheParams& p) { p.cache_seqlens = fake<const std::int32_t>(0x600001); },
      {"cache_seqlens"});
  // Strides: the forward's rules (stride_dim 1, 16-byte multiples, none negative).
  add("q stride_dim 2", [](KvCacheParams& p) { p.q.stride_dim = 2; }, {"q.stride_dim"});
  add("k_cache stride_dim 0", [](KvCacheParams& p) { p.k_cache.stride_dim = 0; }, {"k_cache.stride_dim"});
  add("o stride_dim -1", [](KvCacheParams& p) { p.o.stride_dim = -1; }, {"o.stride_dim"});
  add("fp16 v_cache stride_seq 260 (520 bytes)", [](KvCacheParams& p) { p.v_cache.stride_seq = 260; },
      {"v_cache.stride_seq", "16 bytes"});
  add("fp16 o stride_head 4 (8 bytes)", [](KvCacheParams& p) { p.o.stride_head = 4; }, {"o.stride_head"});
  add("fp16 k_new stride_batch odd", [](KvCacheParams& p) { p.k_new.stride_batch += 1; }, {"k_new.stride_batch"});
  add("negative k_cache stride_batch", [](KvCacheParams& p) { p.k_cache.stride_batch = -p.k_cache.stride_batch; },
      {"k_cache.stride_batch", ">= 0"});
  add("fp32 q stride_head 130 (520 bytes)",
      [](KvCacheParams& p) {
        p = valid_paged(DType::kFloat32);
        p.q.stride_head = 130;
      },
      {"q.stride_head"});
  // Enums and shapes.
  add("dtype 3", [](KvCacheParams& p) { p.dtype = static_cast<DType>(3); }, {"dtype"});
  add("mask causal (top-left)", [](KvCacheParams& p) { p.mask = MaskKind::kCausalTopLeft; }, {"mask", "causal-br"});
  add("mask 7", [](KvCacheParams& p) { p.mask = static_cast<MaskKind>(7); }, {"mask"});
  add("head_dim 0", [](KvCacheParams& p) { p.head_dim = 0; }, {"head_dim"});
  add("head_dim 12", [](KvCacheParams& p) { p.head_dim = 12; }, {"head_dim"});
  add("head_dim 264", [](KvCacheParams& p) { p.head_dim = 264; }, {"head_dim"});
  add("heads_q 6 with heads_kv 4", [](KvCacheParams& p) { p.heads_q = 6, p.heads_kv = 4; }, {"heads_q", "heads_kv"});
  add("heads_kv 0", [](KvCacheParams& p) { p.heads_kv = 0; }, {"heads_kv"});
  add("batch 0", [](KvCacheParams& p) { p.batch = 0; }, {"batch"});
  add("seqlen_q 0", [](KvCacheParams& p) { p.seqlen_q = 0; }, {"seqlen_q"});
  add("seqlen_q -3", [](KvCacheParams& p) { p.seqlen_q = -3; }, {"seqlen_q"});
  add("softmax_scale NaN", [](KvCacheParams& p) { p.softmax_scale = std::numeric_limits<float>::quiet_NaN(); },
      {"softmax_scale"});
  add("num_splits -1", [](KvCacheParams& p) { p.num_splits = -1; }, {"num_splits"});
  add("num_splits 257", [](KvCacheParams& p) { p.num_splits = 257; }, {"num_splits", "256"});
  // The cache's addressing.
  add("num_pages 0", [](KvCacheParams& p) { p.num_pages = 0; }, {"num_pages"});
  add("page_size 0", [](KvCacheParams& p) { p.page_size = 0; }, {"page_size"});
  add("paged page_size 24", [](KvCacheParams& p) { p.page_size = 24; }, {"page_size", "power of two"});
  add("max_pages_per_seq 0", [](KvCacheParams& p) { p.max_pages_per_seq = 0; }, {"max_pages_per_seq"});
  add("max_pages_per_seq -1", [](KvCacheParams& p) { p.max_pages_per_seq = -1; }, {"max_pages_per_seq"});
  add("block_table_stride below max_pages_per_seq", [](KvCacheParams& p) { p.block_table_stride = 3; },
      {"block_table_stride"});
  add("block_table with cache_batch_idx",
      [](KvCacheParams& p) { p.cache_batch_idx = fake<const std::int32_t>(0xA00000); }, {"cache_batch_idx"});
  add("paged capacity 2^31",
      [](KvCacheParams& p) {
        p.page_size = std::int64_t{1} << 30;
        p.max_pages_per_seq = p.block_table_stride = 2;
      },
      {"capacity", "overflow"});
  add("paged capacity 2^31 from 2^27 pages of 16",
      [](KvCacheParams& p) { p.max_pages_per_seq = p.block_table_stride = std::int64_t{1} << 27; },
      {"capacity"});
  // The append.
  add("k_new without v_new", [](KvCacheParams& p) { p.v_new.data = nullptr; }, {"v_new"});
  add("v_new without k_new", [](KvCacheParams& p) { p.k_new.data = nullptr; }, {"k_new"});
  add("k_new without cache_seqlens", [](KvCacheParams& p) { p.cache_seqlens = nullptr; }, {"cache_seqlens"});
  add("seqlen_new 0 with k_new", [](KvCacheParams& p) { p.seqlen_new = 0; }, {"seqlen_new"});
  add("seqlen_new past the capacity (65 > 64)",
      [](KvCacheParams& p) {
        p.seqlen_new = 65;
        p.k_new = TensorRef::bnhd(p.k_new.data, 65, p.heads_kv, p.head_dim);
        p.v_new = TensorRef::bnhd(p.v_new.data, 65, p.heads_kv, p.head_dim);
      },
      {"seqlen_new", "capacity"});
  add("seqlen_new without k_new and v_new",
      [](KvCacheParams& p) { p.k_new.data = p.v_new.data = nullptr; }, {"seqlen_new"});
  return cases;
}

// Cases for the contiguous layout only.
std::vector<InvalidCase> invalid_contiguous_cases() {
  return {
      {"contiguous capacity 2^31",
       [](KvCacheParams& p) {
         p.page_size = std::int64_t{1} << 31;
         p.k_cache = TensorRef::bnhd(p.k_cache.data, p.page_size, p.heads_kv, p.head_dim);
         p.v_cache = TensorRef::bnhd(p.v_cache.data, p.page_size, p.heads_kv, p.head_dim);
       },
       {"page_size", "overflow"}},
      {"cache_batch_idx 2-byte aligned", [](KvCacheParams& p) { p.cache_batch_idx = fake<const std::int32_t>(0xA00002); },
       {"cache_batch_idx"}},
      {"seqlen_new past the capacity (101 > 100)",
       [](KvCacheParams& p) {
         p.seqlen_new = 101;
         p.k_new = TensorRef::bnhd(p.k_new.data, 101, p.heads_kv, p.head_dim);
         p.v_new = TensorRef::bnhd(p.v_new.data, 101, p.heads_kv, p.head_dim);
       },
       {"seqlen_new"}},
  };
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void check_refused(const InvalidCase& c, const KvCacheParams& valid) {
  INFO(c.what);
  KvCacheParams p = valid;
  c.mutate(p);
  const Error e = test::expect_error([&] { validate_kvcache(p); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  INFO("message: " << e.message());
  for (const std::string& name : c.names) CHECK(contains(e.message(), name));
  // The call itself refuses it the same way, with or without a device: nothing is launched.
  const Error call = test::expect_error([&] { attention_with_kvcache(p); });
  CHECK(call.code() == ErrorCode::kInvalidArgument);
  CHECK(call.message() == e.message());
  CHECK(test::expect_error([&] { kvcache_num_splits(p, 132); }).code() == ErrorCode::kInvalidArgument);
}

// Two [B=2, N=3, H=4, d=64] states and their lse, 16-byte aligned fake pointers.
MergeStatesParams valid_merge(DType dtype = DType::kBFloat16) {
  MergeStatesParams p;
  p.dtype = dtype;
  p.batch = 2;
  p.seqlen = 3;
  p.heads = 4;
  p.head_dim = 64;
  p.o_a = TensorRef::bnhd(fake(0x100000), p.seqlen, p.heads, p.head_dim);
  p.o_b = TensorRef::bnhd(fake(0x200000), p.seqlen, p.heads, p.head_dim);
  p.o = TensorRef::bnhd(fake(0x300000), p.seqlen, p.heads, p.head_dim);
  p.lse_a = fake<const float>(0x400000);
  p.lse_b = fake<const float>(0x500000);
  p.lse = fake<float>(0x600000);
  return p;
}

}  // namespace

TEST_CASE("validate_kvcache accepts valid calls") {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    for (std::int64_t head_dim : {8, 64, 72, 96, 128, 256})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight}) {
        INFO(to_string(dtype) << " d=" << head_dim << " " << to_string(mask));
        for (KvCacheParams p : {valid_paged(dtype), valid_contiguous(dtype)}) {
          p.head_dim = head_dim;
          for (TensorRef* t : {&p.q, &p.o, &p.k_new, &p.v_new, &p.k_cache, &p.v_cache}) {
            t->stride_head = 256;  // room for every head dim, a 16-byte multiple in every dtype
            t->stride_seq = 256 * 8;
            t->stride_batch = 256 * 8 * 128;
          }
          p.mask = mask;
          CHECK_NOTHROW(validate_kvcache(p));
        }
      }
  SUBCASE("optional fields") {
    KvCacheParams p = valid_paged();
    p.lse = nullptr;  // lse is optional
    CHECK_NOTHROW(validate_kvcache(p));
    p.k_new.data = p.v_new.data = nullptr;  // no append
    p.seqlen_new = 0;
    CHECK_NOTHROW(validate_kvcache(p));
    p.cache_seqlens = nullptr;  // every sequence full
    CHECK_NOTHROW(validate_kvcache(p));
    p.num_splits = 1;
    CHECK_NOTHROW(validate_kvcache(p));
    p.num_splits = 256;
    CHECK_NOTHROW(validate_kvcache(p));
    KvCacheParams c = valid_contiguous();
    c.cache_batch_idx = nullptr;  // sequence b in page b
    c.page_size = 100;            // a contiguous cache's length need not be a power of two
    CHECK_NOTHROW(validate_kvcache(c));
    c.seqlen_new = 100;  // an append that fills the whole cache
    c.k_new = TensorRef::bnhd(c.k_new.data, 100, c.heads_kv, c.head_dim);
    c.v_new = TensorRef::bnhd(c.v_new.data, 100, c.heads_kv, c.head_dim);
    CHECK_NOTHROW(validate_kvcache(c));
  }
}

TEST_CASE("validate_kvcache: each invalid argument throws kInvalidArgument naming it (paged cache)") {
  const auto cases = invalid_kvcache_cases();
  REQUIRE(cases.size() > 40);
  for (const InvalidCase& c : cases) check_refused(c, valid_paged());
}

TEST_CASE("validate_kvcache: each invalid argument throws kInvalidArgument naming it (contiguous cache)") {
  for (const InvalidCase& c : invalid_contiguous_cases()) check_refused(c, valid_contiguous());
  // The rules that are not about the table hold for a contiguous cache too.
  for (const InvalidCase& c : invalid_kvcache_cases()) {
    if (contains(c.what, "page") || contains(c.what, "block_table") || contains(c.what, "capacity")) continue;
    check_refused(c, valid_contiguous());
  }
}

TEST_CASE("kvcache_num_splits: an explicit count is used, the automatic one depends on the shapes alone") {
  KvCacheParams p = valid_paged();
  p.num_splits = 1;
  CHECK(kvcache_num_splits(p) == 1);
  CHECK(kvcache_num_splits(p, 132) == 1);
  p.num_splits = 3;
  CHECK(kvcache_num_splits(p, 132) == 3);
  p.num_splits = 256;
  CHECK(kvcache_num_splits(p, 8) == 256);

  // B=1, Hkv=8, 65536 tokens: 8 (sequence, KV head) pairs cannot fill 132 SMs unsplit.
  KvCacheParams longest = valid_paged();
  longest.batch = 1;
  longest.heads_q = 32;
  longest.heads_kv = 8;
  longest.page_size = 256;
  longest.max_pages_per_seq = longest.block_table_stride = 256;
  longest.num_pages = 256;
  longest.q = TensorRef::bnhd(longest.q.data, 1, 32, 128);
  longest.o = TensorRef::bnhd(longest.o.data, 1, 32, 128);
  for (TensorRef* t : {&longest.k_cache, &longest.v_cache}) *t = TensorRef::bnhd(t->data, 256, 8, 128);
  for (TensorRef* t : {&longest.k_new, &longest.v_new}) *t = TensorRef::bnhd(t->data, 1, 8, 128);
  REQUIRE(longest.capacity() == 65536);
  const int chosen = kvcache_num_splits(longest, 132);
  CHECK(chosen > 1);
  CHECK(chosen <= 256);

  // Device-side values never change the choice (a captured graph replays for any lengths).
  KvCacheParams other = longest;
  other.cache_seqlens = fake<const std::int32_t>(0x610000);
  other.block_table = fake<const std::int32_t>(0x510000);
  other.k_cache.data = fake(0x310000);
  other.lse = nullptr;
  CHECK(kvcache_num_splits(other, 132) == chosen);

  // Every shape gives a count in [1, 256].
  for (std::int64_t batch : {1, 4, 64, 512})
    for (std::int64_t pages : {1, 16, 256})
      for (int sms : {1, 8, 132}) {
        KvCacheParams s = longest;
        s.batch = batch;
        s.max_pages_per_seq = s.block_table_stride = pages;
        const int n = kvcache_num_splits(s, sms);
        INFO("B=" << batch << " capacity=" << s.capacity() << " SMs=" << sms);
        CHECK(n >= 1);
        CHECK(n <= 256);
      }
}

TEST_CASE("config_query of a KV-cache call is a decode query over the packed rows and the capacity") {
  KvCacheParams p = valid_paged(DType::kBFloat16);
  p.seqlen_q = 3;
  p.mask = MaskKind::kCausalBottomRight;
  const ConfigQuery q = config_query(p);
  CHECK(q.operation == Operation::kDecode);
  CHECK(q.dtype == DType::kBFloat16);
  CHECK(q.head_dim == 128);
  CHECK(q.mask == MaskKind::kCausalBottomRight);
  CHECK(q.seqlen_q == 8 / 2 * 3);
  CHECK(q.seqlen_kv == 64);
  CHECK(config_query(valid_contiguous()).seqlen_kv == 100);
}

TEST_CASE("validate_merge_states: valid calls, in place and without lse") {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    MergeStatesParams p = valid_merge(dtype);
    CHECK_NOTHROW(validate_merge_states(p));
    p.o = p.o_a;  // in place
    p.lse = const_cast<float*>(p.lse_a);
    CHECK_NOTHROW(validate_merge_states(p));
    p.lse = nullptr;
    CHECK_NOTHROW(validate_merge_states(p));
  }
}

TEST_CASE("validate_merge_states: each invalid argument throws kInvalidArgument naming it") {
  struct MergeCase {
    std::string what;
    std::function<void(MergeStatesParams&)> mutate;
    std::vector<std::string> names;
  };
  const std::vector<MergeCase> cases = {
      {"null o_a", [](MergeStatesParams& p) { p.o_a.data = nullptr; }, {"o_a.data", "null"}},
      {"null o_b", [](MergeStatesParams& p) { p.o_b.data = nullptr; }, {"o_b.data", "null"}},
      {"null o", [](MergeStatesParams& p) { p.o.data = nullptr; }, {"o.data", "null"}},
      {"null lse_a", [](MergeStatesParams& p) { p.lse_a = nullptr; }, {"lse_a"}},
      {"null lse_b", [](MergeStatesParams& p) { p.lse_b = nullptr; }, {"lse_b"}},
      {"lse_b 2-byte aligned", [](MergeStatesParams& p) { p.lse_b = fake<const float>(0x500002); }, {"lse_b"}},
      {"lse 2-byte aligned", [](MergeStatesParams& p) { p.lse = fake<float>(0x600002); }, {"lse"}},
      {"o_b 8-byte aligned", [](MergeStatesParams& p) { p.o_b.data = fake(0x200008); }, {"o_b.data", "aligned"}},
      {"o stride_dim 2", [](MergeStatesParams& p) { p.o.stride_dim = 2; }, {"o.stride_dim"}},
      {"bf16 o_a stride_seq odd", [](MergeStatesParams& p) { p.o_a.stride_seq += 1; }, {"o_a.stride_seq"}},
      {"dtype 5", [](MergeStatesParams& p) { p.dtype = static_cast<DType>(5); }, {"dtype"}},
      {"head_dim 0", [](MergeStatesParams& p) { p.head_dim = 0; }, {"head_dim"}},
      {"head_dim 100", [](MergeStatesParams& p) { p.head_dim = 100; }, {"head_dim"}},
      {"batch 0", [](MergeStatesParams& p) { p.batch = 0; }, {"batch"}},
      {"seqlen -1", [](MergeStatesParams& p) { p.seqlen = -1; }, {"seqlen"}},
      {"heads 0", [](MergeStatesParams& p) { p.heads = 0; }, {"heads"}},
      {"batch * heads * seqlen 2^33",
       [](MergeStatesParams& p) {
         p.batch = std::int64_t{1} << 20, p.heads = std::int64_t{1} << 10, p.seqlen = 8;
         for (TensorRef* t : {&p.o_a, &p.o_b, &p.o}) t->stride_batch = t->stride_seq = t->stride_head = 0;
       },
       {"overflow"}},
  };
  for (const MergeCase& c : cases) {
    INFO(c.what);
    MergeStatesParams p = valid_merge();
    c.mutate(p);
    const Error e = test::expect_error([&] { validate_merge_states(p); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    INFO("message: " << e.message());
    for (const std::string& name : c.names) CHECK(contains(e.message(), name));
    const Error call = test::expect_error([&] { merge_states(p); });
    CHECK(call.code() == ErrorCode::kInvalidArgument);
  }
}

TEST_CASE("KV-cache variants: invalid values throw kInvalidArgument, valid ones kUnsupported") {
  for (const KvCacheParams& valid : {valid_paged(), valid_contiguous()}) {
    test::check_variant_cases(valid, [](const KvCacheParams& p) { validate_kvcache(p); });
    test::check_variant_cases(valid, [](const KvCacheParams& p) { kvcache_num_splits(p); });
    test::check_variant_cases(valid, [](const KvCacheParams& p) { attention_with_kvcache(p); });
  }
}

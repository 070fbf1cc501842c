// attention_with_kvcache and merge_states against the KV-cache reference (kvcache_reference.hpp): dtypes x head
// dims x GQA/MQA x query tokens x masks, paged caches with shuffled tables and contiguous ones with permuted
// cache_batch_idx, ragged and hostile lengths, appends across pages, forced and automatic splits, pages outside
// the cache, an explicit stream, and merge_states against attention over the union. Fresh random inputs per
// case; o and lse are poisoned with NaN before the call, cache rows no sequence holds hold NaN throughout, and
// the cache after the call must equal the reference's append bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "flashrtc/attention_kvcache.hpp"
#include "flashrtc_reference/kvcache_reference.hpp"
#include "support/forward_case.hpp"
#include "support/kvcache_layout.hpp"

using namespace flashrtc;
using flashrtc::reference::HostTensor;
using flashrtc::reference::KvCacheProblem;
using flashrtc::testing::HostCache;
using flashrtc::testing::LogicalKv;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One attention_with_kvcache call, on host: the problem (shapes, addressing, lengths), the cache before the
// call (NaN where no sequence holds a token), q and the appended tokens, all representable in dtype.
struct DecodeRun {
  DType dtype = DType::kFloat16;
  KvCacheProblem problem;
  HostCache cache;
  std::vector<double> q, k_new, v_new;  // [B, Nq, Hq, d], [B, seqlen_new, Hkv, d] dense; k_new empty: no append
  bool null_cache_seqlens = false;      // pass cache_seqlens = nullptr (every sequence full)
  bool with_lse = true;
  int num_splits = 0;
  void* stream = nullptr;
  std::optional<float> scale;
  explicit DecodeRun(const KvCacheProblem& p) : problem(p), cache(p, kNaN) {}

  std::string describe() const {
    const KvCacheProblem& p = problem;
    std::string lengths;
    for (std::int32_t n : p.cache_seqlens) lengths += (lengths.empty() ? "" : ",") + std::to_string(n);
    return std::string(to_string(dtype)) + " d=" + std::to_string(p.head_dim) + " mask=" + std::string(to_string(p.mask)) +
           " B=" + std::to_string(p.batch) + " Nq=" + std::to_string(p.seqlen_q) + " Hq=" + std::to_string(p.heads_q) +
           " Hkv=" + std::to_string(p.heads_kv) + (p.paged() ? " paged page_size=" : " contiguous length=") +
           std::to_string(p.page_size) + " pages=" + std::to_string(p.num_pages) +
           " capacity=" + std::to_string(p.capacity()) + " cache_seqlens=[" + (null_cache_seqlens ? "null" : lengths) +
           "] seqlen_new=" + std::to_string(p.seqlen_new) + " num_splits=" + std::to_string(num_splits) +
           (scale ? " scale=" + std::to_string(*scale) : "") + (stream ? " stream" : "") + (with_lse ? "" : " no-lse");
  }
};

// What the device returned: o [B, Nq, Hq, d], lse [B, Hq, Nq], the cache's bytes after the call.
struct DeviceResult {
  std::vector<double> o, lse;
  std::vector<unsigned char> o_bytes, k_cache, v_cache;
};

// The reference: the cache after the append, o and lse in double and at the kernel's input precision, and
// the values the attention averaged (the floor of o's tolerance).
struct ReferenceResult {
  std::vector<double> o, lse, o_lowp, lse_lowp, attended_v;
  std::vector<double> k_cache, v_cache;
};

void fill_random(std::vector<double>& values, DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double& x : values) x = reference::round_to(dtype, normal(rng));
}

// A run over p: random q, k_new/v_new (when p.seqlen_new > 0) and cached tokens [0, cached_length(b)).
DecodeRun make_run(DType dtype, const KvCacheProblem& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  DecodeRun run(p);
  run.dtype = dtype;
  LogicalKv logical(p.batch, p.capacity(), p.heads_kv, p.head_dim);
  fill_random(logical.k, dtype, rng);
  fill_random(logical.v, dtype, rng);
  testing::scatter(p, logical, run.cache, [&](std::int64_t b) { return p.cached_length(b); });
  run.q.resize(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads_q * p.head_dim));
  fill_random(run.q, dtype, rng);
  if (p.seqlen_new > 0) {
    run.k_new.resize(static_cast<std::size_t>(p.batch * p.seqlen_new * p.heads_kv * p.head_dim));
    run.v_new.resize(run.k_new.size());
    fill_random(run.k_new, dtype, rng);
    fill_random(run.v_new, dtype, rng);
  }
  return run;
}

DeviceBuffer upload(const void* data, std::size_t bytes) {
  DeviceBuffer buffer(bytes);
  if (bytes) buffer.copy_from_host(data, bytes);
  return buffer;
}

DeviceBuffer upload_ints(const std::vector<std::int32_t>& values) {
  return upload(values.data(), values.size() * sizeof(std::int32_t));
}

DeviceResult run_on_device(const DecodeRun& run) {
  const KvCacheProblem& p = run.problem;
  const std::size_t elem = dtype_size(run.dtype);
  const auto q_bytes = testing::encode(run.dtype, run.q);
  const auto k_bytes = testing::encode(run.dtype, run.cache.k), v_bytes = testing::encode(run.dtype, run.cache.v);
  DeviceBuffer q_dev = upload(q_bytes.data(), q_bytes.size());
  DeviceBuffer k_dev = upload(k_bytes.data(), k_bytes.size()), v_dev = upload(v_bytes.data(), v_bytes.size());
  DeviceBuffer table_dev = upload_ints(p.block_table), batch_idx_dev = upload_ints(p.cache_batch_idx);
  DeviceBuffer seqlens_dev = upload_ints(p.cache_seqlens);
  const auto kn_bytes = testing::encode(run.dtype, run.k_new), vn_bytes = testing::encode(run.dtype, run.v_new);
  DeviceBuffer kn_dev = upload(kn_bytes.data(), kn_bytes.size()), vn_dev = upload(vn_bytes.data(), vn_bytes.size());
  DeviceBuffer o_dev(run.q.size() * elem);
  const std::size_t lse_count = static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q);
  DeviceBuffer lse_dev(run.with_lse ? lse_count * sizeof(float) : 0);
  o_dev.fill_bytes(0xFF);  // NaN in every dtype: an element the kernels forget to write fails the check
  if (run.with_lse) lse_dev.fill_bytes(0xFF);

  KvCacheParams params;
  params.dtype = run.dtype;
  params.batch = p.batch;
  params.seqlen_q = p.seqlen_q;
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.head_dim = p.head_dim;
  params.q = TensorRef::bnhd(q_dev.data(), p.seqlen_q, p.heads_q, p.head_dim);
  params.o = TensorRef::bnhd(o_dev.data(), p.seqlen_q, p.heads_q, p.head_dim);
  const std::int64_t stride_page = run.cache.stride_page();
  params.k_cache = {k_dev.data(), stride_page, p.heads_kv * p.head_dim, p.head_dim, 1};
  params.v_cache = {v_dev.data(), stride_page, p.heads_kv * p.head_dim, p.head_dim, 1};
  params.num_pages = p.num_pages;
  params.page_size = p.page_size;
  if (p.paged()) {
    params.block_table = static_cast<const std::int32_t*>(table_dev.data());
    params.block_table_stride = p.max_pages_per_seq;
    params.max_pages_per_seq = p.max_pages_per_seq;
  }
  if (!p.cache_batch_idx.empty()) params.cache_batch_idx = static_cast<const std::int32_t*>(batch_idx_dev.data());
  if (!run.null_cache_seqlens) params.cache_seqlens = static_cast<const std::int32_t*>(seqlens_dev.data());
  if (!run.k_new.empty()) {
    params.k_new = TensorRef::bnhd(kn_dev.data(), p.seqlen_new, p.heads_kv, p.head_dim);
    params.v_new = TensorRef::bnhd(vn_dev.data(), p.seqlen_new, p.heads_kv, p.head_dim);
    params.seqlen_new = p.seqlen_new;
  }
  params.lse = run.with_lse ? static_cast<float*>(lse_dev.data()) : nullptr;
  params.softmax_scale = run.scale;
  params.mask = p.mask;
  params.num_splits = run.num_splits;
  params.stream = run.stream;
  attention_with_kvcache(params);
  device_synchronize();  // the whole context: a call on a non-blocking stream included

  DeviceResult r;
  r.o_bytes.resize(run.q.size() * elem);
  o_dev.copy_to_host(r.o_bytes.data(), r.o_bytes.size());
  r.o = testing::decode(run.dtype, r.o_bytes);
  if (run.with_lse) {
    std::vector<float> lse(lse_count);
    lse_dev.copy_to_host(lse.data(), lse.size() * sizeof(float));
    r.lse.assign(lse.begin(), lse.end());
  }
  r.k_cache.resize(k_bytes.size());
  r.v_cache.resize(v_bytes.size());
  k_dev.copy_to_host(r.k_cache.data(), r.k_cache.size());
  v_dev.copy_to_host(r.v_cache.data(), r.v_cache.size());
  return r;
}

ReferenceResult run_reference(const DecodeRun& run) {
  KvCacheProblem p = run.problem;
  if (run.null_cache_seqlens) p.cache_seqlens.clear();
  if (run.scale) p.scale = static_cast<double>(*run.scale);
  ReferenceResult r;
  r.k_cache = run.cache.k;
  r.v_cache = run.cache.v;
  const std::int64_t stride_page = run.cache.stride_page();
  const HostTensor<double> k{r.k_cache.data(), stride_page, p.heads_kv * p.head_dim, p.head_dim, 1};
  const HostTensor<double> v{r.v_cache.data(), stride_page, p.heads_kv * p.head_dim, p.head_dim, 1};
  if (!run.k_new.empty())
    reference::kvcache_append(p, HostTensor<const double>::bnhd(run.k_new.data(), p.seqlen_new, p.heads_kv, p.head_dim),
                              HostTensor<const double>::bnhd(run.v_new.data(), p.seqlen_new, p.heads_kv, p.head_dim),
                              k, v);
  const std::size_t n = run.q.size(), rows = static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q);
  r.o.assign(n, kNaN);
  r.o_lowp.assign(n, kNaN);
  r.lse.assign(rows, kNaN);
  r.lse_lowp.assign(rows, kNaN);
  const auto q = HostTensor<const double>::bnhd(run.q.data(), p.seqlen_q, p.heads_q, p.head_dim);
  const HostTensor<const double> kc{r.k_cache.data(), stride_page, p.heads_kv * p.head_dim, p.head_dim, 1};
  const HostTensor<const double> vc{r.v_cache.data(), stride_page, p.heads_kv * p.head_dim, p.head_dim, 1};
  std::vector<std::future<void>> work;
  for (std::int64_t b = 0; b < p.batch; ++b)
    work.push_back(std::async(std::launch::async, [&, b] {
      reference::attention_with_kvcache_sequence(p, b, q, kc, vc,
                                                 HostTensor<double>::bnhd(r.o.data(), p.seqlen_q, p.heads_q, p.head_dim),
                                                 r.lse.data());
      reference::attention_with_kvcache_sequence(
          p, b, q, kc, vc, HostTensor<double>::bnhd(r.o_lowp.data(), p.seqlen_q, p.heads_q, p.head_dim),
          r.lse_lowp.data(), run.dtype);
    }));
  for (auto& w : work) w.get();
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t j = 0; j < p.length(b); ++j) {
      const std::int64_t page = p.page_of(b, j);
      if (page < 0) continue;
      for (std::int64_t h = 0; h < p.heads_kv; ++h)
        for (std::int64_t d = 0; d < p.head_dim; ++d) r.attended_v.push_back(vc.at(page, j % p.page_size, h, d));
    }
  return r;
}

struct Verdict {
  bool pass = true;
  std::string report;
};

// o and lse by the tolerance rule; the cache bit for bit (untouched rows keep their poison, appended rows
// hold k_new/v_new, nothing else changed).
Verdict compare(const DecodeRun& run, const DeviceResult& got, const ReferenceResult& ref) {
  Verdict v;
  v.report = run.describe();
  const auto o_cmp = reference::compare_forward_o(got.o.data(), ref.o.data(), ref.o_lowp.data(),
                                                  static_cast<std::int64_t>(ref.o.size()), ref.attended_v);
  v.pass = o_cmp.pass;
  v.report += "\n  o:   " + o_cmp.summary();
  if (run.with_lse) {
    const auto lse_cmp = reference::compare_forward_lse(got.lse.data(), ref.lse.data(), ref.lse_lowp.data(),
                                                        static_cast<std::int64_t>(ref.lse.size()));
    v.pass = v.pass && lse_cmp.pass;
    v.report += "\n  lse: " + lse_cmp.summary();
  }
  const auto k_expected = testing::encode(run.dtype, ref.k_cache), v_expected = testing::encode(run.dtype, ref.v_cache);
  std::int64_t k_diff = 0, v_diff = 0;
  const std::size_t elem = dtype_size(run.dtype);
  for (std::size_t i = 0; i < k_expected.size(); i += elem) {
    k_diff += std::memcmp(&k_expected[i], &got.k_cache[i], elem) != 0;
    v_diff += std::memcmp(&v_expected[i], &got.v_cache[i], elem) != 0;
  }
  if (k_diff || v_diff) {
    v.pass = false;
    v.report += "\n  cache differs from the reference append: k " + std::to_string(k_diff) + ", v " +
                std::to_string(v_diff) + " elements";
  }
  return v;
}

struct Checked {
  DeviceResult got;
  ReferenceResult ref;
};

Checked check(const DecodeRun& run) {
  Checked c{run_on_device(run), run_reference(run)};
  const Verdict v = compare(run, c.got, c.ref);
  INFO(v.report);
  CHECK(v.pass);
  if (!v.pass) MESSAGE(v.report);
  return c;
}

KvCacheProblem shape(std::int64_t batch, std::int64_t seqlen_q, std::int64_t heads_q, std::int64_t heads_kv,
                     std::int64_t head_dim, MaskKind mask) {
  KvCacheProblem p;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.mask = mask;
  return p;
}

// Paged: pages_per_seq pages of page_size per sequence plus 3 spare pages, the table a random permutation.
KvCacheProblem paged(KvCacheProblem p, std::int64_t page_size, std::int64_t pages_per_seq, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  testing::make_paged(p, page_size, pages_per_seq, 3, rng);
  return p;
}

// Contiguous: one page of `length` tokens per sequence plus 2 spare pages, cache_batch_idx a permutation.
KvCacheProblem contiguous(KvCacheProblem p, std::int64_t length, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  testing::make_contiguous(p, length, 2, rng);
  return p;
}

constexpr DType kDtypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};
constexpr std::int64_t kHeadDims[] = {64, 128, 256, 96, 72};

}  // namespace

TEST_CASE("dtypes x head dims: paged with a one-token append, contiguous with Nq=3 causal and five appended") {
  std::uint64_t seed = 1;
  for (DType dtype : kDtypes)
    for (std::int64_t d : kHeadDims) {
      // fp32 is served too (the portable family): a kUnsupported here fails the case.
      KvCacheProblem p = paged(shape(4, 1, 8, 2, d, MaskKind::kNone), 16, 20, ++seed);
      p.cache_seqlens = {0, 1, 37, 300};  // ragged: empty, one token, within and past the first pages
      p.seqlen_new = 1;
      check(make_run(dtype, p, ++seed));

      KvCacheProblem c = contiguous(shape(3, 3, 8, 2, d, MaskKind::kCausalBottomRight), 333, ++seed);
      c.cache_seqlens = {1, 0, 250};  // L = 6, 5, 255: causal-br rows see keys j <= t + L - 3
      c.seqlen_new = 5;
      check(make_run(dtype, c, ++seed));
    }
}

TEST_CASE("GQA groups 1, 4, 8 and MQA, one and three query tokens, both masks") {
  struct Heads {
    std::int64_t q, kv;
  };
  constexpr Heads kHeads[] = {{4, 4}, {8, 2}, {16, 2}, {8, 1}};
  std::uint64_t seed = 100;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (const Heads& h : kHeads)
      for (std::int64_t nq : {1, 3})
        for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight}) {
          KvCacheProblem p = paged(shape(3, nq, h.q, h.kv, 128, mask), 64, 8, ++seed);
          p.cache_seqlens = {1, 129, 500};
          check(make_run(dtype, p, ++seed));
        }
}

TEST_CASE("page sizes 16, 64 and 256 with a shuffled table; appends of 1 and 5 tokens at and across page edges") {
  std::uint64_t seed = 200;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16})
    for (std::int64_t page_size : {16, 64, 256})
      for (std::int64_t appended : {1, 5}) {
        KvCacheProblem p = paged(shape(6, 1, 8, 2, 128, MaskKind::kCausalBottomRight), page_size, 4, ++seed);
        const auto ps = static_cast<std::int32_t>(page_size);
        // Empty, one token, the append ending a page, starting a page, crossing into the next page, and
        // ending the capacity.
        p.cache_seqlens = {0, 1, ps - static_cast<std::int32_t>(appended), ps, 2 * ps - 2,
                           4 * ps - static_cast<std::int32_t>(appended)};
        p.seqlen_new = appended;
        check(make_run(dtype, p, ++seed));
      }
}

TEST_CASE("contiguous caches with a permuted cache_batch_idx, and cache_batch_idx absent") {
  std::uint64_t seed = 300;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    KvCacheProblem p = contiguous(shape(5, 1, 8, 8, 128, MaskKind::kNone), 1000, ++seed);
    p.cache_seqlens = {999, 0, 1, 517, 64};
    p.seqlen_new = 1;
    check(make_run(dtype, p, ++seed));
    p.cache_batch_idx.clear();  // sequence b in page b
    check(make_run(dtype, p, ++seed));
    // Without cache_seqlens every sequence holds its whole page.
    KvCacheProblem full = contiguous(shape(2, 3, 4, 1, 64, MaskKind::kCausalBottomRight), 200, ++seed);
    full.cache_seqlens = {200, 200};
    DecodeRun run = make_run(dtype, full, ++seed);
    run.null_cache_seqlens = true;
    check(run);
  }
}

TEST_CASE("cache_seqlens from the device are clamped to [0, capacity - seqlen_new]") {
  std::uint64_t seed = 400;
  for (std::int64_t appended : {0, 5}) {
    KvCacheProblem p = paged(shape(4, 3, 8, 2, 128, MaskKind::kCausalBottomRight), 16, 4, ++seed);
    p.cache_seqlens = {-7, std::numeric_limits<std::int32_t>::min(), 1000, std::numeric_limits<std::int32_t>::max()};
    p.seqlen_new = appended;
    check(make_run(DType::kBFloat16, p, ++seed));
  }
}

TEST_CASE("num_splits forced to 1, to 3 and chosen (0) over 20000 keys: the split combine") {
  std::uint64_t seed = 500;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32})
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight}) {
      KvCacheProblem p = paged(shape(1, mask == MaskKind::kNone ? 1 : 3, 8, 1, 128, mask), 64, 320, ++seed);
      p.cache_seqlens = {19999};
      p.seqlen_new = 1;  // L = 20000
      for (int splits : {1, 3, 0}) {
        DecodeRun run = make_run(dtype, p, seed);
        run.num_splits = splits;
        check(run);
      }
      KvCacheProblem c = contiguous(shape(1, 1, 8, 1, 128, mask), 20000, ++seed);
      c.cache_seqlens = {20000};
      for (int splits : {1, 3, 0}) {
        DecodeRun run = make_run(dtype, c, seed);
        run.num_splits = splits;
        check(run);
      }
    }
  // The automatic choice splits this shape, so the combine ran above.
  KvCacheParams shape_only;
  shape_only.dtype = DType::kFloat16;
  shape_only.batch = 1;
  shape_only.seqlen_q = 1;
  shape_only.heads_q = 8;
  shape_only.heads_kv = 1;
  shape_only.head_dim = 128;
  DeviceBuffer any(256);
  shape_only.q = shape_only.o = TensorRef::bnhd(any.data(), 1, 8, 128);
  shape_only.k_cache = shape_only.v_cache = TensorRef::bnhd(any.data(), 20000, 1, 128);
  shape_only.num_pages = 1;
  shape_only.page_size = 20000;
  CHECK(kvcache_num_splits(shape_only) > 1);
}

TEST_CASE("page ids outside the cache hide their keys and drop appends into them, without a fault") {
  std::uint64_t seed = 600;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    KvCacheProblem p = paged(shape(4, 3, 8, 2, 128, MaskKind::kCausalBottomRight), 16, 6, ++seed);
    p.cache_seqlens = {90, 40, 20, 50};
    p.seqlen_new = 5;
    const auto pages = static_cast<std::int32_t>(p.num_pages);
    p.block_table[0 * 6 + 2] = -1;                                     // sequence 0: keys 32..47 hidden
    p.block_table[1 * 6 + 2] = pages;                                  // sequence 1: the append's page hidden
    p.block_table[2 * 6 + 0] = std::numeric_limits<std::int32_t>::max();  // sequence 2: its first keys
    for (int col = 0; col < 6; ++col) p.block_table[3 * 6 + col] = std::numeric_limits<std::int32_t>::min();
    check(make_run(dtype, p, ++seed));  // sequence 3: every key hidden, o = 0 and lse = -inf
    // A contiguous cache whose cache_batch_idx names no page.
    KvCacheProblem c = contiguous(shape(3, 1, 4, 4, 64, MaskKind::kNone), 100, ++seed);
    c.cache_seqlens = {10, 20, 30};
    c.seqlen_new = 1;
    c.cache_batch_idx[1] = -3;
    c.cache_batch_idx[2] = static_cast<std::int32_t>(c.num_pages);
    check(make_run(dtype, c, ++seed));
  }
}

TEST_CASE("an explicit stream, a custom scale, no lse") {
  Stream stream;
  std::uint64_t seed = 700;
  for (DType dtype : kDtypes) {
    KvCacheProblem p = paged(shape(2, 3, 8, 2, 128, MaskKind::kCausalBottomRight), 64, 40, ++seed);
    p.cache_seqlens = {2500, 7};
    p.seqlen_new = 5;
    DecodeRun run = make_run(dtype, p, ++seed);
    run.stream = stream.handle();
    check(run);
    run.scale = 0.3f;
    run.num_splits = 3;
    check(run);
    run.stream = nullptr;
    run.with_lse = false;
    check(run);
  }
}

namespace {

// merge_states on the device over two results of attention_with_kvcache (their bytes as the kernels wrote
// them); in_place: o is o_a's buffer and lse lse_a's.
DeviceResult merge_on_device(DType dtype, const KvCacheProblem& p, const DeviceResult& a, const DeviceResult& b,
                             bool in_place) {
  std::vector<float> lse_a(a.lse.begin(), a.lse.end()), lse_b(b.lse.begin(), b.lse.end());
  DeviceBuffer oa = upload(a.o_bytes.data(), a.o_bytes.size()), ob = upload(b.o_bytes.data(), b.o_bytes.size());
  DeviceBuffer la = upload(lse_a.data(), lse_a.size() * 4), lb = upload(lse_b.data(), lse_b.size() * 4);
  DeviceBuffer o(in_place ? 0 : a.o_bytes.size()), lse(in_place ? 0 : lse_a.size() * 4);
  if (!in_place) {
    o.fill_bytes(0xFF);
    lse.fill_bytes(0xFF);
  }
  MergeStatesParams m;
  m.dtype = dtype;
  m.batch = p.batch;
  m.seqlen = p.seqlen_q;
  m.heads = p.heads_q;
  m.head_dim = p.head_dim;
  m.o_a = TensorRef::bnhd(oa.data(), p.seqlen_q, p.heads_q, p.head_dim);
  m.o_b = TensorRef::bnhd(ob.data(), p.seqlen_q, p.heads_q, p.head_dim);
  m.lse_a = static_cast<const float*>(la.data());
  m.lse_b = static_cast<const float*>(lb.data());
  m.o = in_place ? m.o_a : TensorRef::bnhd(o.data(), p.seqlen_q, p.heads_q, p.head_dim);
  m.lse = static_cast<float*>(in_place ? la.data() : lse.data());
  merge_states(m);
  device_synchronize();
  DeviceResult r;
  r.o_bytes.resize(a.o_bytes.size());
  (in_place ? oa : o).copy_to_host(r.o_bytes.data(), r.o_bytes.size());
  r.o = testing::decode(dtype, r.o_bytes);
  std::vector<float> l(lse_a.size());
  (in_place ? la : lse).copy_to_host(l.data(), l.size() * 4);
  r.lse.assign(l.begin(), l.end());
  return r;
}

// The merge's lse at the kernel's precision: fp32.
std::vector<double> merge_lse_fp32(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]), top = std::max(x, y);
    out[i] = top == -std::numeric_limits<float>::infinity() ? top : top + std::log(std::exp(x - top) + std::exp(y - top));
  }
  return out;
}

}  // namespace

TEST_CASE("merge_states of attention over two disjoint key sets equals attention over the union, also in place") {
  std::uint64_t seed = 800;
  for (DType dtype : kDtypes)
    for (std::int64_t nq : {1, 3}) {
      // The union: contiguous sequences of lengths L_b; side a holds each sequence's first keys, side b the
      // rest, each in a cache of its own (side b's keys moved to the start of its pages). Mask none: the two
      // sets partition every row's keys. Sequence 2 has no key in b, sequence 3 none at all.
      const std::vector<std::int32_t> lengths = {700, 33, 5, 0}, split = {300, 1, 5, 0};
      KvCacheProblem u = contiguous(shape(4, nq, 8, 2, 128, MaskKind::kNone), 800, ++seed);
      u.cache_seqlens = lengths;
      const DecodeRun union_run = make_run(dtype, u, ++seed);
      DecodeRun side_a = union_run, side_b = union_run;
      side_a.problem.cache_seqlens = split;
      side_b.problem = paged(u, 16, 50, ++seed);
      side_b.cache = HostCache(side_b.problem, kNaN);
      for (std::size_t b = 0; b < lengths.size(); ++b)
        side_b.problem.cache_seqlens[b] = lengths[b] - split[b];
      for (std::int64_t b = 0; b < 4; ++b)
        for (std::int64_t j = split[static_cast<std::size_t>(b)]; j < lengths[static_cast<std::size_t>(b)]; ++j) {
          const std::int64_t to = j - split[static_cast<std::size_t>(b)];
          const std::int64_t from_page = u.page_of(b, j), to_page = side_b.problem.page_of(b, to);
          for (std::int64_t h = 0; h < 2; ++h)
            for (std::int64_t d = 0; d < 128; ++d) {
              side_b.cache.k_view().at(to_page, to % 16, h, d) = union_run.cache.k_cview().at(from_page, j, h, d);
              side_b.cache.v_view().at(to_page, to % 16, h, d) = union_run.cache.v_cview().at(from_page, j, h, d);
            }
        }
      const Checked all = check(union_run), a = check(side_a), b = check(side_b);

      for (bool in_place : {false, true}) {
        const DeviceResult merged = merge_on_device(dtype, u, a.got, b.got, in_place);
        const std::string what = union_run.describe() + (in_place ? " merged in place" : " merged");
        // Against attention over the union; the budget is the merge of the two input-precision results.
        std::vector<double> lowp(all.ref.o.size());
        reference::merge_states(4, nq, 8, 128, HostTensor<const double>::bnhd(a.ref.o_lowp.data(), nq, 8, 128),
                                a.ref.lse_lowp.data(), HostTensor<const double>::bnhd(b.ref.o_lowp.data(), nq, 8, 128),
                                b.ref.lse_lowp.data(), HostTensor<double>::bnhd(lowp.data(), nq, 8, 128), nullptr,
                                dtype);
        const std::vector<double> lse_lowp = merge_lse_fp32(a.ref.lse_lowp, b.ref.lse_lowp);
        const auto o_union = reference::compare_forward_o(merged.o.data(), all.ref.o.data(), lowp.data(),
                                                          static_cast<std::int64_t>(lowp.size()), all.ref.attended_v);
        const auto lse_union = reference::compare_forward_lse(merged.lse.data(), all.ref.lse.data(), lse_lowp.data(),
                                                              static_cast<std::int64_t>(lse_lowp.size()));
        INFO(what << "\n  vs union o:   " << o_union.summary() << "\n  vs union lse: " << lse_union.summary());
        CHECK(o_union.pass);
        CHECK(lse_union.pass);

        // Against the reference merge of the very outputs the device merged.
        std::vector<double> exact(all.ref.o.size()), rounded(exact.size()), lse_exact(all.ref.lse.size());
        const auto oa = HostTensor<const double>::bnhd(a.got.o.data(), nq, 8, 128);
        const auto ob = HostTensor<const double>::bnhd(b.got.o.data(), nq, 8, 128);
        reference::merge_states(4, nq, 8, 128, oa, a.got.lse.data(), ob, b.got.lse.data(),
                                HostTensor<double>::bnhd(exact.data(), nq, 8, 128), lse_exact.data());
        reference::merge_states(4, nq, 8, 128, oa, a.got.lse.data(), ob, b.got.lse.data(),
                                HostTensor<double>::bnhd(rounded.data(), nq, 8, 128), nullptr, dtype);
        const std::vector<double> lse_fp32 = merge_lse_fp32(a.got.lse, b.got.lse);
        const auto o_merge = reference::compare_forward_o(merged.o.data(), exact.data(), rounded.data(),
                                                          static_cast<std::int64_t>(exact.size()), all.ref.attended_v);
        const auto lse_merge = reference::compare_forward_lse(merged.lse.data(), lse_exact.data(), lse_fp32.data(),
                                                              static_cast<std::int64_t>(lse_exact.size()));
        INFO("  vs merge o:   " << o_merge.summary() << "\n  vs merge lse: " << lse_merge.summary());
        CHECK(o_merge.pass);
        CHECK(lse_merge.pass);
      }
    }
}

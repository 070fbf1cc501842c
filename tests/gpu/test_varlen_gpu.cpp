// attention_varlen_forward against the varlen reference (varlen_reference.hpp, each sequence through the
// dense reference): lengths 1, 2 and odd, sequences without keys or queries, a batch of one, 1000 sequences
// of length 1..17, Nq != Nk both ways, GQA and MQA, every mask (causal counted from each sequence's start,
// both alignments), seqused_k, every head dim of the default table, fp16 and bf16 (varlen-mma, and on sm_90a
// varlen-wgmma) and fp32 (varlen-simt). Fresh random inputs per case; o and lse are poisoned with NaN before
// the call, and rows after the last sequence must keep their poison bit for bit. Hostile prefix sums
// (decreasing, negative, past the tensors) must neither fault nor write outside the tensors. On sm_90a the
// Hopper family serves most 16-bit calls; its own cases below name it: lengths across its tile boundaries,
// sequences ending inside a query group, a call without keys, and NaN in the keys past seqused_k that its
// last key tile reads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "flashrtc/attention.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc_reference/varlen_reference.hpp"
#include "gpu_requirements.hpp"
#include "support/forward_case.hpp"

using namespace flashrtc;
using flashrtc::reference::HostTensor;
using flashrtc::reference::VarlenProblem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<std::int32_t> prefix_sums(const std::vector<std::int32_t>& lengths) {
  std::vector<std::int32_t> cu{0};
  for (std::int32_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

// One varlen call on host: the problem (its cu_seqlens, seqused_k, heads, mask), the packed inputs
// representable in dtype, and `spare_q` query rows after the last sequence that no sequence owns.
struct VarlenRun {
  DType dtype = DType::kFloat16;
  VarlenProblem p;
  std::int64_t total_q = 0, total_k = 0, max_seqlen_q = 0, max_seqlen_k = 0;
  std::vector<double> q, k, v;
  bool with_lse = true;
  std::optional<float> scale;
  const char* family = nullptr;  // the family the call must resolve to, where the case names one
  bool poison_unused_keys = false;  // K and V rows past seqused_k hold NaN on the device (a cache's spare room)

  std::string describe() const {
    std::string lengths;
    for (std::int64_t b = 0; b < p.batch() && b < 12; ++b)
      lengths += (b ? "," : "") + std::to_string(p.length_q(b)) + "x" + std::to_string(p.length_k(b));
    if (p.batch() > 12) lengths += ",...";
    return std::string(to_string(dtype)) + " d=" + std::to_string(p.head_dim) +
           " mask=" + std::string(to_string(p.mask)) + " B=" + std::to_string(p.batch()) +
           " Hq=" + std::to_string(p.heads_q) + " Hkv=" + std::to_string(p.heads_kv) +
           " total_q=" + std::to_string(total_q) + " total_k=" + std::to_string(total_k) +
           " max_q=" + std::to_string(max_seqlen_q) + " max_k=" + std::to_string(max_seqlen_k) +
           " lengths (q x k)=[" + lengths + "]" + (p.seqused_k.empty() ? "" : " seqused_k") +
           (with_lse ? "" : " no-lse") + (scale ? " scale=" + std::to_string(*scale) : "");
  }
};

void fill_random(std::vector<double>& values, DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double& x : values) x = reference::round_to(dtype, normal(rng));
}

VarlenRun make_run(DType dtype, std::int64_t head_dim, std::int64_t heads_q, std::int64_t heads_kv,
                   MaskKind mask, const std::vector<std::int32_t>& lengths_q,
                   const std::vector<std::int32_t>& lengths_k, std::uint64_t seed, std::int64_t spare_q = 0) {
  std::mt19937_64 rng(seed);
  VarlenRun run;
  run.dtype = dtype;
  run.p.cu_seqlens_q = prefix_sums(lengths_q);
  run.p.cu_seqlens_k = prefix_sums(lengths_k);
  run.p.heads_q = heads_q;
  run.p.heads_kv = heads_kv;
  run.p.head_dim = head_dim;
  run.p.mask = mask;
  run.total_q = run.p.cu_seqlens_q.back() + spare_q;
  run.total_k = run.p.cu_seqlens_k.back();
  run.p.rows_q = run.total_q;
  run.max_seqlen_q = *std::max_element(lengths_q.begin(), lengths_q.end());
  run.max_seqlen_k = *std::max_element(lengths_k.begin(), lengths_k.end());
  run.q.resize(static_cast<std::size_t>(run.total_q * heads_q * head_dim));
  run.k.resize(static_cast<std::size_t>(run.total_k * heads_kv * head_dim));
  run.v.resize(run.k.size());
  fill_random(run.q, dtype, rng);
  fill_random(run.k, dtype, rng);
  fill_random(run.v, dtype, rng);
  return run;
}

DeviceBuffer upload(const void* data, std::size_t bytes) {
  DeviceBuffer buffer(std::max<std::size_t>(bytes, 16));
  if (bytes) buffer.copy_from_host(data, bytes);
  return buffer;
}

struct DeviceResult {
  std::vector<unsigned char> o_bytes;
  std::vector<double> o;
  std::vector<float> lse;
};

DeviceResult run_on_device(const VarlenRun& run) {
  const VarlenProblem& p = run.p;
  const std::size_t elem = dtype_size(run.dtype);
  const auto q_bytes = testing::encode(run.dtype, run.q);
  auto k_bytes = testing::encode(run.dtype, run.k), v_bytes = testing::encode(run.dtype, run.v);
  if (run.poison_unused_keys)  // 0xFFFF: NaN in fp16 and bf16; the reference never reads these rows
    for (std::int64_t b = 0; b < p.batch(); ++b) {
      const std::size_t row = static_cast<std::size_t>(p.heads_kv * p.head_dim) * elem;
      const std::size_t begin = static_cast<std::size_t>(p.cu_seqlens_k[b] + p.length_k(b)) * row;
      const std::size_t end = static_cast<std::size_t>(p.cu_seqlens_k[b + 1]) * row;
      std::fill(k_bytes.begin() + begin, k_bytes.begin() + end, 0xFF);
      std::fill(v_bytes.begin() + begin, v_bytes.begin() + end, 0xFF);
    }
  DeviceBuffer q_dev = upload(q_bytes.data(), q_bytes.size());
  DeviceBuffer k_dev = upload(k_bytes.data(), k_bytes.size()), v_dev = upload(v_bytes.data(), v_bytes.size());
  DeviceBuffer cu_q_dev = upload(p.cu_seqlens_q.data(), p.cu_seqlens_q.size() * sizeof(std::int32_t));
  DeviceBuffer cu_k_dev = upload(p.cu_seqlens_k.data(), p.cu_seqlens_k.size() * sizeof(std::int32_t));
  DeviceBuffer used_dev = upload(p.seqused_k.data(), p.seqused_k.size() * sizeof(std::int32_t));
  DeviceBuffer o_dev(run.q.size() * elem);
  const std::size_t lse_count = static_cast<std::size_t>(p.heads_q * run.total_q);
  DeviceBuffer lse_dev(lse_count * sizeof(float));
  o_dev.fill_bytes(0xFF);  // NaN in every dtype: an element the kernel forgets to write fails the check
  lse_dev.fill_bytes(0xFF);

  VarlenForwardParams params;
  params.dtype = run.dtype;
  params.batch = p.batch();
  params.total_q = run.total_q;
  params.total_k = run.total_k;
  params.max_seqlen_q = run.max_seqlen_q;
  params.max_seqlen_k = run.max_seqlen_k;
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.head_dim = p.head_dim;
  params.q = TensorRef::bnhd(q_dev.data(), run.total_q, p.heads_q, p.head_dim);
  params.k = TensorRef::bnhd(k_dev.data(), run.total_k, p.heads_kv, p.head_dim);
  params.v = TensorRef::bnhd(v_dev.data(), run.total_k, p.heads_kv, p.head_dim);
  params.o = TensorRef::bnhd(o_dev.data(), run.total_q, p.heads_q, p.head_dim);
  params.cu_seqlens_q = static_cast<const std::int32_t*>(cu_q_dev.data());
  params.cu_seqlens_k = static_cast<const std::int32_t*>(cu_k_dev.data());
  if (!p.seqused_k.empty()) params.seqused_k = static_cast<const std::int32_t*>(used_dev.data());
  params.lse = run.with_lse ? static_cast<float*>(lse_dev.data()) : nullptr;
  params.softmax_scale = run.scale;
  params.mask = p.mask;
  if (run.family) REQUIRE(resolve_config(params).family->name == std::string(run.family));
  attention_varlen_forward(params);
  device_synchronize();  // throws with the failure of the launch

  DeviceResult r;
  r.o_bytes.resize(run.q.size() * elem);
  o_dev.copy_to_host(r.o_bytes.data(), r.o_bytes.size());
  r.o = testing::decode(run.dtype, r.o_bytes);
  r.lse.resize(lse_count);
  lse_dev.copy_to_host(r.lse.data(), r.lse.size() * sizeof(float));
  return r;
}

// The call's rows inside its sequences (o elements and lse entries) against the reference by the tolerance
// rule; rows after the last sequence, and lse without lse, keep the poison bit for bit.
void check(const VarlenRun& run) {
  INFO(run.describe());
  const DeviceResult got = run_on_device(run);
  VarlenProblem p = run.p;
  if (run.scale) p.scale = static_cast<double>(*run.scale);
  std::vector<double> o(run.q.size(), kNaN), o_lowp(run.q.size(), kNaN);
  std::vector<double> lse(got.lse.size(), kNaN), lse_lowp(got.lse.size(), kNaN);
  const auto view = [&](const std::vector<double>& t, std::int64_t rows, std::int64_t heads) {
    return HostTensor<const double>::bnhd(t.data(), rows, heads, p.head_dim);
  };
  reference::forward_varlen(p, view(run.q, run.total_q, p.heads_q), view(run.k, run.total_k, p.heads_kv),
                            view(run.v, run.total_k, p.heads_kv),
                            HostTensor<double>::bnhd(o.data(), run.total_q, p.heads_q, p.head_dim),
                            lse.data());
  reference::forward_varlen(p, view(run.q, run.total_q, p.heads_q), view(run.k, run.total_k, p.heads_kv),
                            view(run.v, run.total_k, p.heads_kv),
                            HostTensor<double>::bnhd(o_lowp.data(), run.total_q, p.heads_q, p.head_dim),
                            lse_lowp.data(), run.dtype);

  const std::int64_t row = p.heads_q * p.head_dim, used_rows = p.cu_seqlens_q.back();
  const std::size_t o_used = static_cast<std::size_t>(used_rows * row);
  const auto o_cmp = reference::compare_forward_o(got.o.data(), o.data(), o_lowp.data(),
                                                  static_cast<std::int64_t>(o_used), run.v);
  INFO("o:   " << o_cmp.summary());
  CHECK(o_cmp.pass);
  const std::size_t elem = dtype_size(run.dtype);
  std::int64_t o_written = 0;
  for (std::size_t i = o_used * elem; i < got.o_bytes.size(); ++i) o_written += got.o_bytes[i] != 0xFF;
  CHECK_MESSAGE(o_written == 0, "bytes of o written after the last sequence: " << o_written);

  std::vector<double> lse_got, lse_ref, lse_ref_lowp;
  std::int64_t lse_written = 0;
  for (std::int64_t h = 0; h < p.heads_q; ++h)
    for (std::int64_t t = 0; t < run.total_q; ++t) {
      const std::size_t i = static_cast<std::size_t>(h * run.total_q + t);
      std::uint32_t bits;
      std::memcpy(&bits, &got.lse[i], 4);
      if (!run.with_lse || t >= used_rows) {
        lse_written += bits != 0xFFFFFFFFu;
        continue;
      }
      lse_got.push_back(got.lse[i]);
      lse_ref.push_back(lse[i]);
      lse_ref_lowp.push_back(lse_lowp[i]);
    }
  CHECK_MESSAGE(lse_written == 0,
                "lse entries written outside the sequences (or without lse): " << lse_written);
  if (run.with_lse) {
    const auto lse_cmp = reference::compare_forward_lse(lse_got.data(), lse_ref.data(), lse_ref_lowp.data(),
                                                        static_cast<std::int64_t>(lse_got.size()));
    INFO("lse: " << lse_cmp.summary());
    CHECK(lse_cmp.pass);
  }
}

constexpr DType kDtypes[] = {DType::kFloat16, DType::kBFloat16};

}  // namespace

TEST_CASE(
    "varlen forward: lengths 1, 2 and odd, no keys, no queries, Nq != Nk, GQA, every mask, dtype, head dim") {
  // Sequence 4 has no keys (o = 0, lse = -inf), sequence 5 no queries; 130 and 65 cross query and key tiles.
  const std::vector<std::int32_t> lq = {1, 2, 7, 33, 5, 0, 130, 65, 3};
  const std::vector<std::int32_t> lk = {1, 2, 9, 17, 0, 4, 64, 131, 3};
  std::uint64_t seed = 1;
  for (DType dtype : kDtypes)
    for (std::int64_t head_dim : {32, 64, 96, 128, 256})
      for (MaskKind mask : kMaskKinds) check(make_run(dtype, head_dim, 4, 2, mask, lq, lk, seed++));
}

TEST_CASE("varlen forward: a batch of one equals a dense call's shape, every mask") {
  std::uint64_t seed = 100;
  for (DType dtype : kDtypes)
    for (MaskKind mask : kMaskKinds) {
      check(make_run(dtype, 128, 2, 2, mask, {257}, {257}, seed++));
      check(make_run(dtype, 64, 4, 1, mask, {300}, {129},
                     seed++));  // Nq > Nk: bottom-right hides the first rows
      check(make_run(dtype, 64, 4, 1, mask, {77}, {400}, seed++));  // Nq < Nk
    }
}

TEST_CASE("varlen forward: 1000 sequences of length 1..17") {
  std::mt19937_64 rng(1000);
  std::uniform_int_distribution<std::int32_t> length(1, 17);
  std::vector<std::int32_t> lq(1000), lk(1000);
  for (std::size_t b = 0; b < lq.size(); ++b) lq[b] = length(rng), lk[b] = length(rng);
  std::uint64_t seed = 200;
  for (DType dtype : kDtypes)
    for (MaskKind mask : kMaskKinds) check(make_run(dtype, 64, 4, 2, mask, lq, lk, seed++));
  check(make_run(DType::kBFloat16, 128, 8, 1, MaskKind::kCausalBottomRight, lq, lk, seed++));  // MQA
}

TEST_CASE(
    "varlen forward: causal masks count from each sequence's start, both alignments, Nq > Nk and Nq < Nk") {
  std::uint64_t seed = 300;
  for (DType dtype : kDtypes)
    for (MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
      check(make_run(dtype, 64, 2, 1, mask, {40, 3, 129, 64}, {10, 70, 64, 129}, seed++));
      check(make_run(dtype, 128, 2, 2, mask, {200, 1, 2}, {50, 1, 1}, seed++));
    }
}

TEST_CASE("varlen forward: seqused_k, a scale, no lse, and rows after the last sequence stay untouched") {
  std::uint64_t seed = 400;
  for (DType dtype : kDtypes)
    for (MaskKind mask : kMaskKinds) {
      VarlenRun run = make_run(dtype, 64, 4, 2, mask, {9, 40, 3}, {30, 70, 5}, seed++, 21);
      run.p.seqused_k = {0, 33, 5};
      check(run);
      VarlenRun scaled = make_run(dtype, 96, 2, 1, mask, {17, 1}, {5, 60}, seed++, 3);
      scaled.scale = -0.3f;
      scaled.with_lse = false;
      check(scaled);
    }
}

TEST_CASE("varlen forward: hostile prefix sums neither fault nor write outside the tensors") {
  // Decreasing, negative and past-the-end entries: the kernel clamps each into the tensors. o and lse sit in
  // the middle of larger poisoned buffers; the guard bytes around them must stay poisoned.
  const std::int64_t total_q = 64, total_k = 48, heads = 2, head_dim = 64, batch = 4;
  const std::vector<std::int32_t> cu_q = {0, 40, 10, 1 << 30, -5}, cu_k = {-7, 30, 2, 48, 1 << 30};
  const std::vector<std::int32_t> used = {1 << 30, -3, 20, 7};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {  // varlen-mma and varlen-simt
    INFO(to_string(dtype));
    const std::size_t elem = dtype_size(dtype), row = static_cast<std::size_t>(heads * head_dim) * elem;
    const std::size_t guard = 4096;
    std::mt19937_64 rng(500);
    std::vector<double> q(static_cast<std::size_t>(total_q * heads * head_dim)),
        k(static_cast<std::size_t>(total_k * heads * head_dim));
    fill_random(q, dtype, rng);
    fill_random(k, dtype, rng);
    const auto q_bytes = testing::encode(dtype, q), k_bytes = testing::encode(dtype, k);
    DeviceBuffer q_dev = upload(q_bytes.data(), q_bytes.size()),
                 k_dev = upload(k_bytes.data(), k_bytes.size());
    DeviceBuffer cu_q_dev = upload(cu_q.data(), cu_q.size() * 4),
                 cu_k_dev = upload(cu_k.data(), cu_k.size() * 4);
    DeviceBuffer used_dev = upload(used.data(), used.size() * 4);
    const std::size_t o_bytes = static_cast<std::size_t>(total_q) * row,
                      lse_bytes = static_cast<std::size_t>(heads * total_q) * 4;
    DeviceBuffer o_dev(guard + o_bytes + guard), lse_dev(guard + lse_bytes + guard);
    o_dev.fill_bytes(0xFF);
    lse_dev.fill_bytes(0xFF);
    for (MaskKind mask : kMaskKinds)
      for (bool with_used : {false, true}) {
        INFO(to_string(mask) << (with_used ? " seqused_k" : ""));
        VarlenForwardParams params;
        params.dtype = dtype;
        params.batch = batch;
        params.total_q = total_q;
        params.total_k = total_k;
        params.max_seqlen_q = total_q;
        params.max_seqlen_k = total_k;
        params.heads_q = params.heads_kv = heads;
        params.head_dim = head_dim;
        params.q = TensorRef::bnhd(q_dev.data(), total_q, heads, head_dim);
        params.k = params.v = TensorRef::bnhd(k_dev.data(), total_k, heads, head_dim);
        params.o =
            TensorRef::bnhd(static_cast<unsigned char*>(o_dev.data()) + guard, total_q, heads, head_dim);
        params.lse = reinterpret_cast<float*>(static_cast<unsigned char*>(lse_dev.data()) + guard);
        params.cu_seqlens_q = static_cast<const std::int32_t*>(cu_q_dev.data());
        params.cu_seqlens_k = static_cast<const std::int32_t*>(cu_k_dev.data());
        params.seqused_k = with_used ? static_cast<const std::int32_t*>(used_dev.data()) : nullptr;
        params.mask = mask;
        attention_varlen_forward(params);
        device_synchronize();
        std::vector<unsigned char> o_host(o_dev.size()), lse_host(lse_dev.size());
        o_dev.copy_to_host(o_host.data(), o_host.size());
        lse_dev.copy_to_host(lse_host.data(), lse_host.size());
        const auto poisoned = [](const std::vector<unsigned char>& bytes, std::size_t from, std::size_t to) {
          return std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(from),
                             bytes.begin() + static_cast<std::ptrdiff_t>(to),
                             [](unsigned char c) { return c == 0xFF; });
        };
        CHECK(poisoned(o_host, 0, guard));
        CHECK(poisoned(o_host, guard + o_bytes, o_host.size()));
        CHECK(poisoned(lse_host, 0, guard));
        CHECK(poisoned(lse_host, guard + lse_bytes, lse_host.size()));
        // Sequence 0 is well formed (queries [0, 40), keys [0, 30) after clamping -7): its rows are written.
        CHECK_FALSE(poisoned(o_host, guard, guard + 40 * row));
      }
  }
}

TEST_CASE(
    "varlen forward fp32 (varlen-simt): ragged lengths, no keys, every mask, GQA and MQA, lse, rows after "
    "the last sequence untouched") {
  // As the 16-bit case: sequence 4 has no keys (o = 0, lse = -inf), sequence 5 no queries; 130 and 65 cross
  // the simt tiles (64 rows) both ways; 21 spare query rows after the last sequence keep their poison.
  const std::vector<std::int32_t> lq = {1, 2, 7, 33, 5, 0, 130, 65, 3};
  const std::vector<std::int32_t> lk = {1, 2, 9, 17, 0, 4, 64, 131, 3};
  std::uint64_t seed = 600;
  for (std::int64_t head_dim : {32, 64, 96, 128, 256})
    for (MaskKind mask : kMaskKinds)
      check(make_run(DType::kFloat32, head_dim, 4, 2, mask, lq, lk, seed++, 21));
  for (MaskKind mask : kMaskKinds) {
    check(make_run(DType::kFloat32, 64, 8, 1, mask, lq, lk, seed++));  // MQA
    // Causal counted from each sequence's start, both alignments, Nq > Nk and Nq < Nk.
    check(make_run(DType::kFloat32, 128, 2, 1, mask, {40, 3, 129, 64}, {10, 70, 64, 129}, seed++));
    check(make_run(DType::kFloat32, 64, 2, 2, mask, {300}, {129}, seed++));  // a batch of one, Nq > Nk
  }
}

TEST_CASE("varlen forward fp32: seqused_k, a negative scale, no lse, 1000 short sequences") {
  std::uint64_t seed = 700;
  for (MaskKind mask : kMaskKinds) {
    VarlenRun run = make_run(DType::kFloat32, 64, 4, 2, mask, {9, 40, 3}, {30, 70, 5}, seed++, 5);
    run.p.seqused_k = {0, 33, 5};
    check(run);
    VarlenRun scaled = make_run(DType::kFloat32, 96, 2, 1, mask, {17, 1}, {5, 60}, seed++, 3);
    scaled.scale = -0.3f;
    scaled.with_lse = false;
    check(scaled);
  }
  std::mt19937_64 rng(1001);
  std::uniform_int_distribution<std::int32_t> length(1, 17);
  std::vector<std::int32_t> lq(1000), lk(1000);
  for (std::size_t b = 0; b < lq.size(); ++b) lq[b] = length(rng), lk[b] = length(rng);
  check(make_run(DType::kFloat32, 64, 4, 2, MaskKind::kCausalBottomRight, lq, lk, seed++));
}

// The Hopper family (varlen-wgmma), named: its TMA loads read past a sequence's end into the next one's rows
// (masked), and a query group that runs past its sequence's end stores its rows itself where a TMA box would
// overwrite the next sequence's. Each length list is followed by spare rows no sequence owns, which keep
// their poison; the lengths sit on both sides of the 64-row groups and the 64-192-row blocks and key tiles.
TEST_CASE("varlen forward on sm_90a: the Hopper family across tile boundaries" * FLASHRTC_NEEDS_SM90A) {
  const std::vector<std::int32_t> lq = {1, 63, 64, 65, 127, 128, 129, 1000};
  const std::vector<std::int32_t> lk = {129, 1000, 65, 0, 64, 127, 1, 63};  // an empty key sequence
  std::uint64_t seed = 600;
  for (DType dtype : kDtypes)
    for (std::int64_t head_dim : {64, 96, 128, 256})
      for (MaskKind mask : kMaskKinds) {
        VarlenRun run = make_run(dtype, head_dim, 4, 2, mask, lq, lk, seed++, 70);  // GQA
        run.family = "varlen-wgmma";
        check(run);
      }
  // No key in the whole call (total_k = 0): every row o = 0, lse = -inf.
  for (MaskKind mask : kMaskKinds) {
    VarlenRun run = make_run(DType::kFloat16, 128, 2, 1, mask, {5, 70}, {0, 0}, seed++, 3);
    run.family = "varlen-wgmma";
    check(run);
  }
  // Each length as the last sequence: the rows after it belong to no sequence and must stay poisoned, also
  // where it ends inside a group; Nq = Nk there, and a sequence of 1000 queries before it.
  for (std::int32_t last : lq)
    for (MaskKind mask : kMaskKinds) {
      VarlenRun run = make_run(DType::kBFloat16, 128, 2, 2, mask, {1000, last}, {1000, last}, seed++, 64);
      run.family = "varlen-wgmma";
      check(run);
    }
}

TEST_CASE("varlen forward on sm_90a: many sequences ending inside a group, no lse" * FLASHRTC_NEEDS_SM90A) {
  // 300 sequences of 65 queries: each one's second group holds one row of it and 63 of the next sequence,
  // which that group must not write (the next sequence's own values are checked against the reference).
  std::uint64_t seed = 700;
  for (DType dtype : kDtypes)
    for (MaskKind mask : kMaskKinds) {
      VarlenRun run = make_run(dtype, 64, 2, 1, mask, std::vector<std::int32_t>(300, 65),
                               std::vector<std::int32_t>(300, 70), seed++, 5);
      run.family = "varlen-wgmma";
      run.with_lse = dtype == DType::kFloat16;
      check(run);
    }
}

TEST_CASE("varlen forward on sm_90a: keys past seqused_k hold NaN and weigh nothing" * FLASHRTC_NEEDS_SM90A) {
  // The Hopper kernel's last key tile reads a sequence's rows past seqused_k (a KV cache's spare room, here
  // NaN in K and V): masked scores give P = 0, and the rows of V are cleared before P V, where 0 * NaN would
  // be NaN. Used lengths on both sides of the key tiles, and one sequence with none.
  std::uint64_t seed = 800;
  for (DType dtype : kDtypes)
    for (std::int64_t head_dim : {64, 96, 128, 256})
      for (MaskKind mask : kMaskKinds) {
        VarlenRun run = make_run(dtype, head_dim, 4, 2, mask, {70, 129, 1, 200}, {300, 200, 64, 256}, seed++);
        run.p.seqused_k = {65, 128, 0, 129};
        run.poison_unused_keys = true;
        run.family = "varlen-wgmma";
        check(run);
      }
}

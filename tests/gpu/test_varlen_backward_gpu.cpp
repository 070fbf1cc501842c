// attention_varlen_backward against the varlen reference backward (varlen_reference.hpp, each sequence
// through the dense reference backward): lengths 1, 2 and odd, sequences without keys or queries, a batch of
// one, 1000 sequences of length 1..17, Nq != Nk both ways, GQA and MQA, every mask (causal counted from each
// sequence's start, both alignments), seqused_k (keys past it get dK = dV = 0), a scale, head dims 64, 128
// and 256, fp16 and bf16. Fresh random inputs per case; o and lse are the reference forward's. d_q, d_k and
// d_v are poisoned before each call, and rows after the last sequence must keep their poison bit for bit;
// every case runs twice and the two runs must agree bit for bit (deterministic calls). Hostile prefix sums
// must neither fault nor write outside the gradients. On sm_90a the Hopper pair (varlen-bwd-wgmma,
// varlen-bwd-dq-wgmma) serves most deterministic 16-bit calls, and the fused kernel (varlen-bwd-wgmma-fused,
// then varlen-bwd-dq-convert) the others: their own cases below name them, each run both ways: lengths
// across the tile boundaries, NaN in the rows no sequence owns and in the keys past seqused_k (the TMA boxes
// read them), many sequences ending inside a tile, calls without keys.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "flashrtc/attention_backward.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc_reference/varlen_reference.hpp"
#include "gpu_requirements.hpp"
#include "support/forward_case.hpp"

using namespace flashrtc;
using flashrtc::reference::HostTensor;
using flashrtc::reference::VarlenProblem;

namespace {

std::vector<std::int32_t> prefix_sums(const std::vector<std::int32_t>& lengths) {
  std::vector<std::int32_t> cu{0};
  for (std::int32_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

void fill_random(std::vector<double>& values, DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double& x : values) x = reference::round_to(dtype, normal(rng));
}

// One varlen backward call on host: the problem, the packed inputs representable in dtype (o and lse from the
// reference forward), and `spare_q`, `spare_k` rows after the last sequence that no sequence owns.
struct VarlenBackwardRun {
  DType dtype = DType::kFloat16;
  VarlenProblem p;
  std::int64_t total_q = 0, total_k = 0, max_seqlen_q = 0, max_seqlen_k = 0;
  std::vector<double> q, k, v, o, d_o;
  std::vector<float> lse;  // [Hq, total_q], as the forward writes it
  std::optional<float> scale;
  bool hopper = false;  // the call must resolve to the Hopper pair (varlen-bwd-wgmma, varlen-bwd-dq-wgmma)
  // Not deterministic, with the fused kernel's tile: varlen-bwd-wgmma-fused and varlen-bwd-dq-convert (dQ
  // added in no fixed order: two runs may differ in their last bits).
  bool fused = false;
  // NaN on the device in q, k, v, o, d_o and lse rows after the last sequence, and (poison_unused_keys) in K
  // and V rows past seqused_k: the reference never reads them, and they must not reach any gradient.
  bool poison_spare = false;
  bool poison_unused_keys = false;

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
           (scale ? " scale=" + std::to_string(*scale) : "") + (hopper ? " hopper" : "") +
           (fused ? " fused" : "") + (poison_spare ? " NaN in spare rows" : "") +
           (poison_unused_keys ? " NaN past seqused_k" : "");
  }
  HostTensor<const double> view(const std::vector<double>& t, std::int64_t rows, std::int64_t heads) const {
    return HostTensor<const double>::bnhd(t.data(), rows, heads, p.head_dim);
  }
};

// The inputs of a call; seqused_k and scale may be set before finish() computes o and lse.
VarlenBackwardRun make_run(DType dtype, std::int64_t head_dim, std::int64_t heads_q, std::int64_t heads_kv,
                           MaskKind mask, const std::vector<std::int32_t>& lengths_q,
                           const std::vector<std::int32_t>& lengths_k, std::uint64_t seed,
                           std::int64_t spare_q = 0, std::int64_t spare_k = 0) {
  std::mt19937_64 rng(seed);
  VarlenBackwardRun run;
  run.dtype = dtype;
  run.p.cu_seqlens_q = prefix_sums(lengths_q);
  run.p.cu_seqlens_k = prefix_sums(lengths_k);
  run.p.heads_q = heads_q;
  run.p.heads_kv = heads_kv;
  run.p.head_dim = head_dim;
  run.p.mask = mask;
  run.total_q = run.p.cu_seqlens_q.back() + spare_q;
  run.total_k = run.p.cu_seqlens_k.back() + spare_k;
  run.p.rows_q = run.total_q;
  run.max_seqlen_q = *std::max_element(lengths_q.begin(), lengths_q.end());
  run.max_seqlen_k = *std::max_element(lengths_k.begin(), lengths_k.end());
  run.q.resize(static_cast<std::size_t>(run.total_q * heads_q * head_dim));
  run.d_o.resize(run.q.size());
  run.k.resize(static_cast<std::size_t>(run.total_k * heads_kv * head_dim));
  run.v.resize(run.k.size());
  fill_random(run.q, dtype, rng);
  fill_random(run.k, dtype, rng);
  fill_random(run.v, dtype, rng);
  fill_random(run.d_o, dtype, rng);
  return run;
}

// o (rounded to dtype) and lse (float) from the reference forward, as the forward kernel hands them over.
void finish(VarlenBackwardRun& run) {
  VarlenProblem p = run.p;
  if (run.scale) p.scale = static_cast<double>(*run.scale);
  run.o.assign(run.q.size(), 0.0);
  std::vector<double> lse(static_cast<std::size_t>(p.heads_q * run.total_q), 0.0);
  reference::forward_varlen(
      p, run.view(run.q, run.total_q, p.heads_q), run.view(run.k, run.total_k, p.heads_kv),
      run.view(run.v, run.total_k, p.heads_kv),
      HostTensor<double>::bnhd(run.o.data(), run.total_q, p.heads_q, p.head_dim), lse.data());
  for (double& x : run.o) x = reference::round_to(run.dtype, x);
  run.lse.assign(lse.begin(), lse.end());
}

DeviceBuffer upload(const void* data, std::size_t bytes) {
  DeviceBuffer buffer(std::max<std::size_t>(bytes, 16));
  if (bytes) buffer.copy_from_host(data, bytes);
  return buffer;
}

std::vector<unsigned char> download(const DeviceBuffer& buffer, std::size_t bytes) {
  std::vector<unsigned char> host(bytes);
  if (bytes) buffer.copy_to_host(host.data(), bytes);
  return host;
}

struct DeviceGradients {
  std::vector<unsigned char> dq, dk, dv;
};

// Runs the call `runs` times, poisoning the gradients before each; returns every run's bytes.
std::vector<DeviceGradients> run_on_device(const VarlenBackwardRun& run, int runs) {
  const VarlenProblem& p = run.p;
  const std::size_t elem = dtype_size(run.dtype);
  auto q_bytes = testing::encode(run.dtype, run.q), k_bytes = testing::encode(run.dtype, run.k),
       v_bytes = testing::encode(run.dtype, run.v), o_bytes = testing::encode(run.dtype, run.o),
       do_bytes = testing::encode(run.dtype, run.d_o);
  std::vector<float> lse = run.lse;
  // 0xFF bytes: NaN in fp16 and bf16.
  const std::size_t q_row = static_cast<std::size_t>(p.heads_q * p.head_dim) * elem;
  const std::size_t k_row = static_cast<std::size_t>(p.heads_kv * p.head_dim) * elem;
  const auto poison = [](std::vector<unsigned char>& bytes, std::size_t from, std::size_t to) {
    std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(from),
              bytes.begin() + static_cast<std::ptrdiff_t>(to), 0xFF);
  };
  if (run.poison_spare) {
    const std::size_t q_from = static_cast<std::size_t>(p.cu_seqlens_q.back()) * q_row;
    const std::size_t k_from = static_cast<std::size_t>(p.cu_seqlens_k.back()) * k_row;
    for (auto* bytes : {&q_bytes, &o_bytes, &do_bytes}) poison(*bytes, q_from, bytes->size());
    for (auto* bytes : {&k_bytes, &v_bytes}) poison(*bytes, k_from, bytes->size());
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t t = p.cu_seqlens_q.back(); t < run.total_q; ++t)
        lse[static_cast<std::size_t>(h * run.total_q + t)] = std::numeric_limits<float>::quiet_NaN();
  }
  if (run.poison_unused_keys)
    for (std::size_t b = 0; b < p.seqused_k.size(); ++b) {
      const std::size_t end = static_cast<std::size_t>(p.cu_seqlens_k[b + 1]) * k_row;
      const std::size_t from = static_cast<std::size_t>(p.cu_seqlens_k[b] + p.seqused_k[b]) * k_row;
      for (auto* bytes : {&k_bytes, &v_bytes}) poison(*bytes, std::min(from, end), end);
    }
  DeviceBuffer q_dev = upload(q_bytes.data(), q_bytes.size()), o_dev = upload(o_bytes.data(), o_bytes.size());
  DeviceBuffer do_dev = upload(do_bytes.data(), do_bytes.size());
  DeviceBuffer k_dev = upload(k_bytes.data(), k_bytes.size()), v_dev = upload(v_bytes.data(), v_bytes.size());
  DeviceBuffer lse_dev = upload(lse.data(), lse.size() * sizeof(float));
  DeviceBuffer cu_q_dev = upload(p.cu_seqlens_q.data(), p.cu_seqlens_q.size() * sizeof(std::int32_t));
  DeviceBuffer cu_k_dev = upload(p.cu_seqlens_k.data(), p.cu_seqlens_k.size() * sizeof(std::int32_t));
  DeviceBuffer used_dev = upload(p.seqused_k.data(), p.seqused_k.size() * sizeof(std::int32_t));
  DeviceBuffer dq_dev(std::max<std::size_t>(q_bytes.size(), 16)),
      dk_dev(std::max<std::size_t>(k_bytes.size(), 16)), dv_dev(std::max<std::size_t>(k_bytes.size(), 16));

  VarlenBackwardParams params;
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
  params.d_o = TensorRef::bnhd(do_dev.data(), run.total_q, p.heads_q, p.head_dim);
  params.lse = static_cast<const float*>(lse_dev.data());
  params.d_q = TensorRef::bnhd(dq_dev.data(), run.total_q, p.heads_q, p.head_dim);
  params.d_k = TensorRef::bnhd(dk_dev.data(), run.total_k, p.heads_kv, p.head_dim);
  params.d_v = TensorRef::bnhd(dv_dev.data(), run.total_k, p.heads_kv, p.head_dim);
  params.cu_seqlens_q = static_cast<const std::int32_t*>(cu_q_dev.data());
  params.cu_seqlens_k = static_cast<const std::int32_t*>(cu_k_dev.data());
  if (!p.seqused_k.empty()) params.seqused_k = static_cast<const std::int32_t*>(used_dev.data());
  params.softmax_scale = run.scale;
  params.mask = p.mask;
  params.deterministic = !run.fused;
  if (run.fused) {
    params.config = TileConfig{64, 128, 12, 2};
    const std::optional<DeviceTarget> target = current_device_target();
    REQUIRE(target.has_value());
    REQUIRE(varlen_backward_operations(params, target->arch)[1] == Operation::kBackwardFusedVarlen);
    REQUIRE(resolve_config(config_query(params, Operation::kBackwardFusedVarlen), *target).family->name ==
            "varlen-bwd-wgmma-fused");
  } else if (run.hopper) {
    const std::optional<DeviceTarget> target = current_device_target();
    REQUIRE(target.has_value());
    REQUIRE(resolve_config(config_query(params, Operation::kBackwardVarlen), *target).family->name ==
            "varlen-bwd-wgmma");
    REQUIRE(resolve_config(config_query(params, Operation::kBackwardDqVarlen), *target).family->name ==
            "varlen-bwd-dq-wgmma");
  }
  std::vector<DeviceGradients> results;
  for (int r = 0; r < runs; ++r) {
    // NaN in every dtype: an element the kernels forget to write fails the check.
    dq_dev.fill_bytes(0xFF);
    dk_dev.fill_bytes(0xFF);
    dv_dev.fill_bytes(0xFF);
    attention_varlen_backward(params);
    device_synchronize();  // throws with the failure of a launch
    results.push_back({download(dq_dev, run.q.size() * elem), download(dk_dev, run.k.size() * elem),
                       download(dv_dev, run.k.size() * elem)});
  }
  return results;
}

std::int64_t bytes_written(const std::vector<unsigned char>& bytes, std::size_t from) {
  return std::count_if(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.end(),
                       [](unsigned char c) { return c != 0xFF; });
}

// The gradients of the rows inside the sequences against the reference by the tolerance rule; rows after the
// last sequence keep the poison bit for bit; a second run gives the same bits.
void check(VarlenBackwardRun run) {
  finish(run);
  INFO(run.describe());
  const std::vector<DeviceGradients> got = run_on_device(run, 2);
  if (!run.fused) {
    CHECK_MESSAGE(got[0].dq == got[1].dq, "dq differs between two runs");
    CHECK_MESSAGE(got[0].dk == got[1].dk, "dk differs between two runs");
    CHECK_MESSAGE(got[0].dv == got[1].dv, "dv differs between two runs");
  }

  VarlenProblem p = run.p;
  if (run.scale) p.scale = static_cast<double>(*run.scale);
  const std::vector<double> lse(run.lse.begin(), run.lse.end());
  const auto reference_gradients = [&](std::optional<DType> precision) {
    reference::Gradients g{std::vector<double>(run.q.size()), std::vector<double>(run.k.size()),
                           std::vector<double>(run.k.size())};
    reference::backward_varlen(
        p, run.view(run.q, run.total_q, p.heads_q), run.view(run.k, run.total_k, p.heads_kv),
        run.view(run.v, run.total_k, p.heads_kv), run.view(run.o, run.total_q, p.heads_q), lse.data(),
        run.view(run.d_o, run.total_q, p.heads_q),
        HostTensor<double>::bnhd(g.dq.data(), run.total_q, p.heads_q, p.head_dim),
        HostTensor<double>::bnhd(g.dk.data(), run.total_k, p.heads_kv, p.head_dim),
        HostTensor<double>::bnhd(g.dv.data(), run.total_k, p.heads_kv, p.head_dim), precision);
    return g;
  };
  // Only the rows of the sequences are compared; the rest must not be written.
  const std::size_t q_used = static_cast<std::size_t>(p.cu_seqlens_q.back() * p.heads_q * p.head_dim);
  const std::size_t k_used = static_cast<std::size_t>(p.cu_seqlens_k.back() * p.heads_kv * p.head_dim);
  const auto used = [&](reference::Gradients g) {
    g.dq.resize(q_used);
    g.dk.resize(k_used);
    g.dv.resize(k_used);
    return g;
  };
  const reference::Gradients got_values =
      used({testing::decode(run.dtype, got[1].dq), testing::decode(run.dtype, got[1].dk),
            testing::decode(run.dtype, got[1].dv)});
  const reference::GradientComparison cmp = reference::compare_gradients(
      got_values, used(reference_gradients(std::nullopt)), used(reference_gradients(run.dtype)));
  INFO(cmp.summary());
  CHECK(cmp.pass());
  const std::size_t elem = dtype_size(run.dtype);
  const std::int64_t written = bytes_written(got[1].dq, q_used * elem) +
                               bytes_written(got[1].dk, k_used * elem) +
                               bytes_written(got[1].dv, k_used * elem);
  CHECK_MESSAGE(written == 0, "bytes of d_q, d_k, d_v written after the last sequence: " << written);
}

constexpr DType kDtypes[] = {DType::kFloat16, DType::kBFloat16};

}  // namespace

TEST_CASE(
    "varlen backward: lengths 1, 2 and odd, no keys, no queries, Nq != Nk, GQA, every mask, dtype, head "
    "dim") {
  // Sequence 4 has no keys (dQ = 0), sequence 5 no queries (its keys' dK = dV = 0); 130 and 65 cross query
  // and key tiles. Rows after the last sequence: 5 queries, 3 keys.
  const std::vector<std::int32_t> lq = {1, 2, 7, 33, 5, 0, 130, 65, 3};
  const std::vector<std::int32_t> lk = {1, 2, 9, 17, 0, 4, 64, 131, 3};
  std::uint64_t seed = 1;
  for (DType dtype : kDtypes)
    for (std::int64_t head_dim : {64, 128, 256})
      for (MaskKind mask : kMaskKinds) check(make_run(dtype, head_dim, 4, 2, mask, lq, lk, seed++, 5, 3));
}

TEST_CASE("varlen backward: a batch of one, every mask, Nq == Nk, Nq > Nk, Nq < Nk") {
  std::uint64_t seed = 100;
  for (DType dtype : kDtypes)
    for (MaskKind mask : kMaskKinds) {
      check(make_run(dtype, 128, 2, 2, mask, {257}, {257}, seed++));
      check(make_run(dtype, 64, 4, 1, mask, {300}, {129}, seed++));  // bottom-right hides the first rows
      check(make_run(dtype, 64, 4, 1, mask, {77}, {400}, seed++));
    }
}

TEST_CASE("varlen backward: 1000 sequences of length 1..17") {
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
    "varlen backward: causal masks count from each sequence's start, both alignments, Nq > Nk and Nq < Nk") {
  std::uint64_t seed = 300;
  for (DType dtype : kDtypes)
    for (MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}) {
      check(make_run(dtype, 64, 2, 1, mask, {40, 3, 129, 64}, {10, 70, 64, 129}, seed++));
      check(make_run(dtype, 128, 2, 2, mask, {200, 1, 2}, {50, 1, 1}, seed++));
    }
}

TEST_CASE("varlen backward: seqused_k (keys past it get dK = dV = 0), and a scale") {
  std::uint64_t seed = 400;
  for (DType dtype : kDtypes)
    for (MaskKind mask : kMaskKinds) {
      VarlenBackwardRun run = make_run(dtype, 64, 4, 2, mask, {9, 40, 3, 5}, {30, 70, 5, 8}, seed++, 21, 6);
      run.p.seqused_k = {0, 33, 5, 1};
      check(run);
      VarlenBackwardRun scaled = make_run(dtype, 128, 2, 1, mask, {17, 1}, {5, 60}, seed++, 3);
      scaled.scale = -0.3f;
      check(scaled);
    }
}

TEST_CASE("varlen backward: hostile prefix sums neither fault nor write outside the gradients") {
  // Decreasing, negative and past-the-end entries: the kernels clamp each into the tensors. d_q, d_k and d_v
  // sit in the middle of larger poisoned buffers; the guard bytes around them must stay poisoned.
  const std::int64_t total_q = 64, total_k = 48, heads = 2, head_dim = 64, batch = 4;
  const std::vector<std::int32_t> cu_q = {0, 40, 10, 1 << 30, -5}, cu_k = {-7, 30, 2, 48, 1 << 30};
  const std::vector<std::int32_t> used = {1 << 30, -3, 20, 7};
  for (DType dtype : kDtypes) {
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
    const std::vector<float> lse(static_cast<std::size_t>(heads * total_q), 1.f);
    DeviceBuffer lse_dev = upload(lse.data(), lse.size() * sizeof(float));
    DeviceBuffer cu_q_dev = upload(cu_q.data(), cu_q.size() * 4),
                 cu_k_dev = upload(cu_k.data(), cu_k.size() * 4);
    DeviceBuffer used_dev = upload(used.data(), used.size() * 4);
    const std::size_t q_bytes_n = static_cast<std::size_t>(total_q) * row,
                      k_bytes_n = static_cast<std::size_t>(total_k) * row;
    DeviceBuffer dq_dev(guard + q_bytes_n + guard), dk_dev(guard + k_bytes_n + guard),
        dv_dev(guard + k_bytes_n + guard);
    // On sm_90a also the fused kernel, whose dQ workspace tiles are placed from the clamped bounds.
    std::vector<bool> fused_modes{false};
    if (const std::optional<DeviceTarget> target = current_device_target();
        target && target->arch == "sm_90a")
      fused_modes.push_back(true);
    for (bool fused : fused_modes)
      for (MaskKind mask : kMaskKinds)
        for (bool with_used : {false, true}) {
          INFO(to_string(mask) << (with_used ? " seqused_k" : "") << (fused ? " fused" : ""));
          dq_dev.fill_bytes(0xFF);
          dk_dev.fill_bytes(0xFF);
          dv_dev.fill_bytes(0xFF);
          const auto inner = [&](DeviceBuffer& b, std::int64_t rows) {
            return TensorRef::bnhd(static_cast<unsigned char*>(b.data()) + guard, rows, heads, head_dim);
          };
          VarlenBackwardParams params;
          params.dtype = dtype;
          params.batch = batch;
          params.total_q = total_q;
          params.total_k = total_k;
          params.max_seqlen_q = total_q;
          params.max_seqlen_k = total_k;
          params.heads_q = params.heads_kv = heads;
          params.head_dim = head_dim;
          params.q = params.o = params.d_o = TensorRef::bnhd(q_dev.data(), total_q, heads, head_dim);
          params.k = params.v = TensorRef::bnhd(k_dev.data(), total_k, heads, head_dim);
          params.lse = static_cast<const float*>(lse_dev.data());
          params.d_q = inner(dq_dev, total_q);
          params.d_k = inner(dk_dev, total_k);
          params.d_v = inner(dv_dev, total_k);
          params.cu_seqlens_q = static_cast<const std::int32_t*>(cu_q_dev.data());
          params.cu_seqlens_k = static_cast<const std::int32_t*>(cu_k_dev.data());
          params.seqused_k = with_used ? static_cast<const std::int32_t*>(used_dev.data()) : nullptr;
          params.mask = mask;
          params.deterministic = !fused;
          if (fused) params.config = TileConfig{64, 128, 12, 2};
          attention_varlen_backward(params);
          device_synchronize();
          const auto poisoned = [](const DeviceBuffer& b, std::size_t from, std::size_t to) {
            std::vector<unsigned char> host(b.size());
            b.copy_to_host(host.data(), host.size());
            return std::all_of(host.begin() + static_cast<std::ptrdiff_t>(from),
                               host.begin() + static_cast<std::ptrdiff_t>(to),
                               [](unsigned char c) { return c == 0xFF; });
          };
          CHECK(poisoned(dq_dev, 0, guard));
          CHECK(poisoned(dq_dev, guard + q_bytes_n, dq_dev.size()));
          CHECK(poisoned(dk_dev, 0, guard));
          CHECK(poisoned(dk_dev, guard + k_bytes_n, dk_dev.size()));
          CHECK(poisoned(dv_dev, 0, guard));
          CHECK(poisoned(dv_dev, guard + k_bytes_n, dv_dev.size()));
          // Sequence 0 is well formed (queries [0, 40), keys [0, 30) after clamping -7): its rows are
          // written.
          CHECK_FALSE(poisoned(dq_dev, guard, guard + 40 * row));
          CHECK_FALSE(poisoned(dk_dev, guard, guard + 30 * row));
        }
  }
}

// The Hopper kernels, named: their TMA boxes read past a sequence's end into the next one's rows, and after
// the last sequence into rows no sequence owns, NaN here: scores there are 0 by select, and the Q, dO, K and
// V rows past the end are cleared before the products, where 0 * NaN would be NaN; their per-thread stores
// stay within the sequence, and the fused kernel's dQ tiles within the sequence's own. Lengths on both sides
// of the 64- and 128-row tiles for queries and keys, Nq != Nk, an empty key sequence, GQA.
TEST_CASE("varlen backward on sm_90a: the Hopper pair across tile boundaries, NaN after the last sequence" *
          FLASHRTC_NEEDS_SM90A) {
  const std::vector<std::int32_t> lq = {1, 63, 64, 65, 127, 128, 129, 1000};
  const std::vector<std::int32_t> lk = {129, 1000, 65, 0, 64, 127, 1, 63};
  std::uint64_t seed = 600;
  for (bool fused : {false, true}) {
    for (DType dtype : kDtypes)
      for (std::int64_t head_dim : {64, 96, 128})
        for (MaskKind mask : kMaskKinds) {
          VarlenBackwardRun run = make_run(dtype, head_dim, 4, 2, mask, lq, lk, seed++, 70, 50);
          run.hopper = run.poison_spare = true;
          run.fused = fused;
          check(run);
        }
    // Each length as the last sequence's queries and keys (Nq != Nk), the rows after it NaN; MQA.
    for (std::size_t i = 0; i < lq.size(); ++i)
      for (MaskKind mask : kMaskKinds) {
        const std::int32_t keys = lq[lq.size() - 1 - i];
        VarlenBackwardRun run =
            make_run(DType::kBFloat16, 128, 4, 1, mask, {200, lq[i]}, {150, keys}, seed++, 64, 64);
        run.hopper = run.poison_spare = true;
        run.fused = fused;
        check(run);
      }
  }
}

TEST_CASE("varlen backward on sm_90a: keys past seqused_k hold NaN and get dK = dV = 0" *
          FLASHRTC_NEEDS_SM90A) {
  // The last key tile of a sequence reads its rows past seqused_k (NaN in K and V): their P and dS are 0 by
  // select, dK and dV 0, and the dQ pass clears those K rows before dS K. Used lengths on both sides of the
  // key tiles, and one sequence with none.
  std::uint64_t seed = 800;
  for (bool fused : {false, true})
    for (DType dtype : kDtypes)
      for (std::int64_t head_dim : {64, 96, 128})
        for (MaskKind mask : kMaskKinds) {
          VarlenBackwardRun run =
              make_run(dtype, head_dim, 4, 2, mask, {70, 129, 1, 200}, {300, 200, 64, 256}, seed++, 9, 7);
          run.p.seqused_k = {65, 128, 0, 129};
          run.hopper = run.poison_spare = run.poison_unused_keys = true;
          run.fused = fused;
          check(run);
        }
}

TEST_CASE("varlen backward on sm_90a: many sequences ending inside a tile, and calls without keys" *
          FLASHRTC_NEEDS_SM90A) {
  // 300 sequences of 65 queries and 70 keys: each tile after a sequence's first holds a few of its rows and
  // the rest of the next sequence's, which must weigh nothing and not be written.
  std::uint64_t seed = 900;
  for (bool fused : {false, true}) {
    for (DType dtype : kDtypes)
      for (MaskKind mask : kMaskKinds) {
        VarlenBackwardRun run = make_run(dtype, 64, 2, 1, mask, std::vector<std::int32_t>(300, 65),
                                         std::vector<std::int32_t>(300, 70), seed++, 5, 3);
        run.hopper = run.poison_spare = true;
        run.fused = fused;
        check(run);
      }
    // No key in the whole call (total_k = 0): dQ = 0 for every query of the sequences.
    for (MaskKind mask : kMaskKinds) {
      VarlenBackwardRun run = make_run(DType::kFloat16, 128, 2, 1, mask, {5, 70}, {0, 0}, seed++, 3);
      run.hopper = run.poison_spare = true;
      run.fused = fused;
      check(run);
    }
  }
}

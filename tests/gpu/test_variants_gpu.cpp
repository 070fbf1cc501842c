// The dense forward's sliding windows and softcaps (docs/variants.md) against the Eigen reference, which
// computes them from the definitions: windows on either side and both, under every mask (causal with a
// window), wider than the sequence, rows with no visible key (o = 0, lse = -inf), Nq != Nk both ways;
// softcaps small (most scores saturate) and huge (the same as none), with a window and with a scale; fp16 and
// bf16 at d = 64 and 128 (and the other default head dims once), GQA, lengths across tile boundaries. They
// run on the tensor-core family (mma), on every GPU: the calls resolve to it, also on sm_90a where the Hopper
// family serves the plain calls. Fresh random inputs, o and lse poisoned with NaN, the tolerance rule of the
// dense suites (forward_case.hpp). fp32 calls with a variant are refused with kUnsupported naming it: no
// float32 family computes variants.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flashrtc/attention.hpp"
#include "flashrtc/config_resolution.hpp"
#include "support/forward_case.hpp"

using namespace flashrtc;
using flashrtc::testing::ForwardCase;
using flashrtc::testing::run_forward_case;

namespace {

AttentionVariants window(std::int64_t left, std::int64_t right) {
  AttentionVariants v;
  v.window_left = left;
  v.window_right = right;
  return v;
}

AttentionVariants softcap(float cap, AttentionVariants v = {}) {
  v.softcap = cap;
  return v;
}

ForwardCase make_case(DType dtype, int head_dim, MaskKind mask, std::int64_t seqlen_q, std::int64_t seqlen_kv,
                      AttentionVariants variants, std::uint64_t seed) {
  ForwardCase c;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.mask = mask;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = seqlen_q;
  c.seqlen_kv = seqlen_kv;
  c.variants = variants;
  c.seed = seed;
  return c;
}

void check(const ForwardCase& c) {
  const testing::CaseResult r = run_forward_case(c);
  INFO(r.report);
  CHECK(r.pass);
}

// The family the call resolves to on this GPU.
std::string family_for(const ForwardCase& c) {
  ConfigQuery q;
  q.dtype = c.dtype;
  q.head_dim = c.head_dim;
  q.mask = c.mask;
  q.seqlen_q = c.seqlen_q;
  q.seqlen_kv = c.seqlen_kv;
  q.variants = variant_bits(c.variants);
  const std::optional<DeviceTarget> target = current_device_target();
  REQUIRE(target.has_value());
  return resolve_config(q, *target).family->name;
}

constexpr MaskKind kMasks[] = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};

}  // namespace

TEST_CASE("window and softcap calls resolve to the tensor-core forward on this GPU") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int head_dim : {64, 128})
      for (const AttentionVariants& v : {window(16, 0), softcap(30.f), softcap(30.f, window(8, 8))}) {
        const ForwardCase c = make_case(dtype, head_dim, MaskKind::kNone, 300, 500, v, 1);
        INFO(c.describe());
        CHECK(family_for(c) == "mma");
      }
}

TEST_CASE("sliding windows match the reference: sides, masks, lengths, d = 64 and 128, fp16 and bf16") {
  struct Shape {
    std::int64_t seqlen_q, seqlen_kv;
  };
  // Nq == Nk, Nq < Nk, Nq > Nk (bottom-right alignment leaves the first rows without keys), lengths off the
  // tile sizes, and one short call.
  const Shape shapes[] = {{257, 257}, {130, 515}, {515, 130}, {1, 77}, {200, 1}};
  const AttentionVariants windows[] = {
      window(0, 0),    // the diagonal key only
      window(32, -1),  // left only
      window(-1, 24),  // right only
      window(100, 7),  // both, across several key tiles
      window(5000, 5000) /* wider than every sequence: no window */,
  };
  std::uint64_t seed = 1;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int head_dim : {64, 128})
      for (MaskKind mask : kMasks)
        for (const Shape& s : shapes)
          for (const AttentionVariants& w : windows)
            check(make_case(dtype, head_dim, mask, s.seqlen_q, s.seqlen_kv, w, seed++));
}

TEST_CASE("rows with no visible key get o = 0 and lse = -inf; whole blocks without keys too") {
  // Bottom-right alignment with Nq > Nk and a window (0, 0): rows i < Nq - Nk see nothing; with 600 rows
  // and 40 keys whole query blocks see none.
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight}) {
      check(make_case(dtype, 64, mask, 600, 40, window(0, 0), 11));
      check(make_case(dtype, 128, mask, 600, 40, window(3, 2), 12));
    }
  // Top-left causal with a right-hand window past the sequence: row i sees [i - left, i] within Nk.
  check(make_case(DType::kFloat16, 64, MaskKind::kCausalTopLeft, 300, 100, window(16, 50), 13));
}

TEST_CASE("softcaps match the reference: small (saturating) and huge, with windows, masks and a scale") {
  std::uint64_t seed = 100;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int head_dim : {64, 128})
      for (MaskKind mask : kMasks) {
        // 0.5: most scores sit on tanh's flat ends; 30: Gemma 2's; 1e6: tanh is linear over the scores.
        for (float cap : {0.5f, 30.f, 1e6f})
          check(make_case(dtype, head_dim, mask, 193, 321, softcap(cap), seed++));
        check(make_case(dtype, head_dim, mask, 321, 193, softcap(5.f, window(40, 40)), seed++));
      }
  // Large scores: a scale of 1 at d = 128 puts raw scores far past the cap.
  ForwardCase c = make_case(DType::kBFloat16, 128, MaskKind::kNone, 256, 384, softcap(2.f), 200);
  c.scale = 1.f;
  check(c);
}

TEST_CASE("every default head dim runs a window with a softcap") {
  std::uint64_t seed = 300;
  for (int head_dim : {32, 96, 256})
    for (MaskKind mask : kMasks)
      check(make_case(DType::kBFloat16, head_dim, mask, 250, 333, softcap(20.f, window(64, 0)), seed++));
}

TEST_CASE("float32 calls with a window or a softcap are refused with kUnsupported naming the variant") {
  for (const AttentionVariants& v : {window(8, 8), softcap(30.f)}) {
    const ForwardCase c = make_case(DType::kFloat32, 64, MaskKind::kNone, 64, 64, v, 400);
    INFO(c.describe());
    try {
      run_forward_case(c);
      FAIL("the call ran");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kUnsupported);
      CHECK(std::string(e.what()).find(v.softcap > 0.f ? "softcap" : "sliding window") != std::string::npos);
    }
  }
}

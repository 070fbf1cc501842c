// The forward kernel against the Eigen reference over dtypes x head dims x masks x GQA x lengths x layouts.
#include <doctest/doctest.h>

#include "flashrtc/tile_config.hpp"
#include "support/forward_case.hpp"

using namespace flashrtc;
using flashrtc::testing::ForwardCase;
using flashrtc::testing::Layout;

namespace {

void check(const ForwardCase& c) {
  const auto result = flashrtc::testing::run_forward_case(c);
  INFO(result.report);
  CHECK(result.pass);
  if (!result.pass) MESSAGE(result.report);
}

constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr int kHeadDims[] = {32, 64, 96, 128, 256};
constexpr MaskKind kMasks[] = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};

struct Shape {
  std::int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_kv;
  Layout layout;
  std::int64_t row_pad;
};
// Covers Hq/Hkv in {1, 4, Hq}, lengths {1, 17, 128, 1000, 4096}, Nq < Nk and Nq > Nk (fully masked rows under
// the bottom-right mask), both layouts and a padded view, for every dtype x head dim x mask.
constexpr Shape kShapes[] = {
    {2, 4, 4, 17, 17, Layout::kBnhd, 0},      {1, 4, 1, 128, 1000, Layout::kBhnd, 0},
    {1, 8, 2, 1000, 128, Layout::kBnhd, 0},   {1, 1, 1, 1, 1, Layout::kBhnd, 0},
    {1, 2, 2, 1, 4096, Layout::kBnhd, 0},     {1, 4, 1, 1000, 1000, Layout::kBhnd, 8},
};

}  // namespace

TEST_CASE("forward matches the reference: dtypes x head dims x masks x shapes") {
  for (DType dtype : kDtypes)
    for (int d : kHeadDims)
      for (MaskKind mask : kMasks)
        for (const Shape& s : kShapes) {
          ForwardCase c;
          c.dtype = dtype;
          c.head_dim = d;
          c.mask = mask;
          c.batch = s.batch, c.heads_q = s.heads_q, c.heads_kv = s.heads_kv;
          c.seqlen_q = s.seqlen_q, c.seqlen_kv = s.seqlen_kv;
          c.layout = s.layout;
          c.row_pad = s.row_pad;
          check(c);
        }
}

TEST_CASE("forward matches the reference at 4096 x 4096") {
  for (DType dtype : kDtypes)
    for (int d : {64, 128})
      for (MaskKind mask : kMasks) {
        ForwardCase c;
        c.dtype = dtype, c.head_dim = d, c.mask = mask;
        c.batch = 1, c.heads_q = 2, c.heads_kv = 1, c.seqlen_q = 4096, c.seqlen_kv = 4096;
        c.layout = d == 64 ? Layout::kBhnd : Layout::kBnhd;
        check(c);
      }
}

TEST_CASE("odd head dims, custom, negative and zero scales, no lse") {
  for (int d : {8, 40, 72, 200}) {
    ForwardCase c;
    c.dtype = DType::kBFloat16, c.head_dim = d, c.mask = MaskKind::kCausalBottomRight;
    c.batch = 2, c.heads_q = 3, c.heads_kv = 1, c.seqlen_q = 77, c.seqlen_kv = 301;
    check(c);
  }
  for (float scale : {0.3f, -0.5f, 0.f, 2.0f}) {
    ForwardCase c;
    c.dtype = DType::kFloat32, c.head_dim = 64, c.mask = MaskKind::kCausalTopLeft, c.scale = scale;
    c.heads_q = 2, c.heads_kv = 2, c.seqlen_q = 300, c.seqlen_kv = 300;
    check(c);
  }
  ForwardCase c;
  c.dtype = DType::kFloat16, c.head_dim = 128, c.with_lse = false, c.seqlen_q = 200, c.seqlen_kv = 200;
  check(c);
}

TEST_CASE("a non-default stream") {
  Stream stream;
  for (DType dtype : kDtypes) {
    ForwardCase c;
    c.dtype = dtype, c.head_dim = 128, c.mask = MaskKind::kCausalTopLeft, c.stream = stream.handle();
    c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.seqlen_q = 513, c.seqlen_kv = 513;
    check(c);
  }
}

TEST_CASE("every tile configuration the tuner may pick computes the same function") {
  const DeviceInfo device = current_device();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16})
    for (int d : {64, 96, 128}) {
      const auto space = forward_config_space(dtype, d, device.smem_per_block_optin_bytes);
      REQUIRE(!space.empty());
      // Every 5th configuration keeps the run short while covering each block size, warp count and stage count.
      for (std::size_t i = d % 5; i < space.size(); i += 5) {
        ForwardCase c;
        c.dtype = dtype, c.head_dim = d, c.mask = MaskKind::kCausalBottomRight, c.config = space[i];
        c.batch = 1, c.heads_q = 2, c.heads_kv = 1, c.seqlen_q = 190, c.seqlen_kv = 333;
        check(c);
      }
    }
}

TEST_CASE("repeated launches give identical bits") {
  ForwardCase c;
  c.dtype = DType::kFloat32, c.head_dim = 128, c.mask = MaskKind::kCausalTopLeft;
  c.batch = 2, c.heads_q = 8, c.heads_kv = 8, c.seqlen_q = 1000, c.seqlen_kv = 1000;
  const auto first = flashrtc::testing::run_forward_case(c);
  const auto second = flashrtc::testing::run_forward_case(c);
  CHECK(first.pass);
  // Same seed, same inputs: any differing bit means the kernel races.
  CHECK(first.output == second.output);
}

// Small enough to run under compute-sanitizer (memcheck, racecheck): one shape per family, dtype and mask,
// odd lengths with Nq < Nk, GQA, both layouts.
TEST_CASE("compute-sanitizer set: every dtype and mask on a small odd shape") {
  for (DType dtype : kDtypes)
    for (MaskKind mask : kMasks) {
      ForwardCase c;
      c.dtype = dtype, c.head_dim = dtype == DType::kFloat32 ? 64 : 128, c.mask = mask;
      c.batch = 1, c.heads_q = 2, c.heads_kv = 1, c.seqlen_q = 77, c.seqlen_kv = 133;
      c.layout = mask == MaskKind::kNone ? Layout::kBhnd : Layout::kBnhd;
      check(c);
    }
}

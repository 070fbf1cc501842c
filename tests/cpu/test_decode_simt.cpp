// The SIMT decode family (decode-simt, kernel_sources/flashrtc/attention_decode_simt.cuh): its tile rules,
// its place in the family table, and its default tiles compiled by NVRTC at the head dims that stress its
// layout (the smallest each default row serves: vectors a row's lanes leave idle) without spills.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/simt_decode_shape.cuh"
#include "flashrtc/tuning_space.hpp"

using namespace flashrtc;

namespace {

const KernelFamily& decode_simt() {
  const KernelFamily* f = find_kernel_family("decode-simt");
  REQUIRE(f != nullptr);
  return *f;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("decode-simt serves every dtype's decode from sm_80, fp32 alone and below decode-mma") {
  const KernelFamily& f = decode_simt();
  CHECK(f.operation == Operation::kDecode);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) CHECK(f.serves_dtype(dtype));
  for (const char* arch : {"sm_80", "sm_90a", "sm_120"}) {
    INFO(arch);
    CHECK(select_kernel_family(Operation::kDecode, DType::kFloat32, 128, arch).family == &f);
    CHECK(select_kernel_family(Operation::kDecode, DType::kBFloat16, 128, arch).family->name == "decode-mma");
    CHECK(select_kernel_family(Operation::kDecode, DType::kFloat16, 40, arch).family->name == "decode-mma");
  }
  CHECK(&portable_family(Operation::kDecode, DType::kFloat32) == &f);
  CHECK(contains(f.arch_mismatch("sm_75"), "sm_80"));
  // Every mask a KV cache takes has a default at every head dim; the top-left causal mask has none.
  for (int d = 8; d <= 256; d += 8)
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight})
      for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        INFO("d=" << d << " " << to_string(mask) << " " << to_string(dtype));
        const TileConfig tile = f.default_config(dtype, d, mask, kSmemBytesSm80, 0, "sm_80");
        CHECK(f.check_config(dtype, d, tile, kSmemBytesSm80) == "");
      }
  CHECK_FALSE(f.default_row(128, MaskKind::kNone).serves_mask(MaskKind::kCausalTopLeft));
}

TEST_CASE("decode-simt's tile rules name the field that is wrong") {
  const KernelFamily& f = decode_simt();
  const auto reason = [&](int head_dim, TileConfig tile) {
    return f.check_config(DType::kFloat32, head_dim, tile, kSmemBytesSm90);
  };
  CHECK(reason(128, {4, 16, 4, 2}) == "");
  // 8 rows of 8 floats of q and O per thread, with one tile's K and V or two.
  CHECK(contains(reason(128, {8, 16, 4, 1}), "block_m/block_n/stages: the register tile exceeds 160 floats"));
  CHECK(contains(reason(128, {8, 16, 4, 2}), "block_m/block_n/stages: the register tile exceeds 160 floats"));
  CHECK(contains(reason(128, {8, 16, 3, 1}), "warps: must be 1, 2, 4 or 8"));
  CHECK(contains(reason(128, {8, 16, 4, 3}), "stages: must be 1 or 2"));
  CHECK(contains(reason(128, {17, 16, 4, 1}), "block_m: must be 1 to 16"));
  // d = 128: 16 lanes per row, 8 key groups in 4 warps.
  CHECK(contains(reason(128, {8, 4, 4, 1}), "block_n: must be a multiple of the key groups"));
  CHECK(contains(reason(128, {8, 12, 4, 1}), "block_n: must be a multiple of the key groups"));
  // d = 256: 32 lanes per row, 4 key groups: 64 keys are 16 per thread.
  CHECK(contains(reason(256, {1, 64, 4, 1}), "block_n: more than 8 keys per thread"));
  CHECK(contains(reason(256, {16, 32, 4, 1}), "the register tile exceeds 160 floats"));
  // The end merge's shared memory: 64 key groups (8 warps of 4-lane groups at d = 32) of 4 rows, 34 KB.
  CHECK(SimtDecodeShape{32, 4, 64, 8, 1}.smem_bytes() == 64u * 4u * 34u * 4u);
  CHECK(contains(f.check_config(DType::kFloat32, 32, {4, 64, 8, 1}, 32 * 1024), "shared memory"));
  CHECK(f.check_config(DType::kFloat32, 32, {4, 64, 8, 1}, 48 * 1024) == "");
  // The kernel's own rule, which check_config's generic bounds shadow for block_m < 1.
  CHECK(contains(SimtDecodeShape{128, 0, 16, 4, 1}.invalid_reason(), "block_m: must be 1 to 16"));
}

TEST_CASE(
    "decode-simt's defaults compile without spills for sm_80 and sm_90a at each row's smallest head dim") {
  RuntimeConfig config = runtime_config();
  config.disk_cache = false;
  config.always_compile = false;
  config.require_cached = false;
  test::ConfigOverride scoped(config);

  const KernelFamily& f = decode_simt();
  // The largest head dim of each row, every dtype and mask, is compiled on four archs by
  // test_default_margin.cpp; here the smallest, whose rows leave lanes or vectors idle.
  struct Case {
    int head_dim;
    DType dtype;
    MaskKind mask;
  };
  const std::vector<Case> cases = {
      {8, DType::kFloat32, MaskKind::kCausalBottomRight},
      {8, DType::kFloat16, MaskKind::kNone},
      {40, DType::kFloat32, MaskKind::kNone},
      {40, DType::kBFloat16, MaskKind::kCausalBottomRight},
      {72, DType::kFloat32, MaskKind::kCausalBottomRight},
      {72, DType::kFloat16, MaskKind::kCausalBottomRight},
      {136, DType::kFloat32, MaskKind::kCausalBottomRight},
      {136, DType::kBFloat16, MaskKind::kNone},
  };
  for (const std::string arch : {"sm_80", "sm_90a"})
    for (const Case& c : cases) {
      KernelSpec spec;
      spec.family = &f;
      spec.dtype = c.dtype;
      spec.head_dim = c.head_dim;
      spec.mask = c.mask;
      spec.tile = f.default_config(c.dtype, c.head_dim, c.mask, assumed_sm_limits(arch).smem_per_block_bytes,
                                   0, arch);
      INFO(arch << " " << to_string(c.dtype) << " d=" << c.head_dim << " " << to_string(c.mask) << " "
                << to_string(spec.tile));
      const ResourceReport r = compile_kernel(spec, arch).resources;
      MESSAGE(arch << " " << to_string(c.dtype) << " d=" << c.head_dim << " " << to_string(c.mask)
                   << ": registers=" << r.registers);
      CHECK(r.registers > 0);
      CHECK(r.registers <= kDefaultMaxRegisters);
      CHECK(r.spill_store_bytes == 0);
      CHECK(r.spill_load_bytes == 0);
    }
}

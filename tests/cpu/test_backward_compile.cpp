// Every default specialization of the backward's kernel families (a sample of the fused kernel's) compiles
// under NVRTC (no GPU needed) for sm_80 and sm_90a (each family for the archs it runs on), with a ptxas
// resource report, no spills, no serialized wgmma and a shared-memory plan that fits its archs.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile_config.hpp"

using namespace flashrtc;

namespace {

constexpr int kHeadDims[] = {8, 32, 64, 96, 128, 256};
constexpr MaskKind kMasks[] = {MaskKind::kNone, MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight};
const char* const kArchs[] = {"sm_80", "sm_90a"};

struct Job {
  KernelSpec spec;
  std::string arch;
  std::optional<CompiledKernelInfo> info;
  std::string error;
};

bool has_mask_argument(const KernelFamily& family) {
  return family.takes(TemplateArg::kMask);
}

bool is_backward(Operation op) {
  return (op >= Operation::kBackward && op <= Operation::kBackwardDqConvert) ||
         op == Operation::kBackwardFused;
}

// The fused kernel's defaults are one tile; a handful of its specializations (bf16 at each head dim, every
// mask at d=128, fp16 at d=128) keeps the sm_90a compiles within what CI's two cores take.
bool sampled(const KernelFamily& family, DType dtype, int head_dim, MaskKind mask) {
  if (family.operation != Operation::kBackwardFused) return true;
  return head_dim >= 128 ? dtype == DType::kBFloat16 || mask == MaskKind::kNone
                         : dtype == DType::kBFloat16 && mask == MaskKind::kNone;
}

RuntimeConfig memory_only_config() {
  RuntimeConfig config = runtime_config();
  config.disk_cache = false;
  config.always_compile = false;
  config.require_cached = false;
  return config;
}

}  // namespace

TEST_CASE("every backward family is in the table, one per operation and dtype group") {
  for (Operation op : {Operation::kBackward, Operation::kBackwardPrep, Operation::kBackwardDq,
                       Operation::kBackwardDqConvert})
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
      for (int head_dim : kHeadDims) {
        if (dtype == DType::kFloat32 && (op == Operation::kBackward || op == Operation::kBackwardDq))
          continue;
        INFO(to_string(op) << " " << to_string(dtype) << " d=" << head_dim);
        const KernelFamily& family = portable_family(op, dtype, head_dim);
        CHECK(family.operation == op);
        CHECK(family.serves_dtype(dtype));
        CHECK(select_kernel_family(op, dtype, head_dim, "sm_80").family == &family);
        // On sm_90a a Hopper family may rank above the portable one for the head dims it serves.
        const KernelFamily* hopper = select_kernel_family(op, dtype, head_dim, "sm_90a").family;
        REQUIRE(hopper != nullptr);
        CHECK(hopper->operation == op);
        if (hopper != &family) {
          CHECK(hopper->priority > family.priority);
          CHECK(hopper->needs_arch_specific);
          CHECK(hopper->serves_head_dim(head_dim));
        }
      }
  for (int head_dim : {64, 96, 128})
    CHECK(select_kernel_family(Operation::kBackward, DType::kBFloat16, head_dim, "sm_90a").family->name ==
          "bwd-wgmma");
  for (int head_dim : {32, 256})
    CHECK(select_kernel_family(Operation::kBackward, DType::kBFloat16, head_dim, "sm_90a").family->name ==
          "bwd-mma");
  for (DType dtype : {DType::kFloat16, DType::kBFloat16})
    for (int head_dim : {64, 96, 128})
      CHECK(select_kernel_family(Operation::kBackwardDq, dtype, head_dim, "sm_90a").family->name ==
            "bwd-dq-wgmma");
  // The fused main kernels: Hopper only, fp16 and bf16 at d 64, 96, 128 and (bwd-wgmma-split) 256; everything
  // else runs the separate pass (backward_operations).
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int head_dim : {64, 96, 128}) {
      const KernelFamily* fused =
          select_kernel_family(Operation::kBackwardFused, dtype, head_dim, "sm_90a").family;
      CHECK(fused->name == "bwd-wgmma-fused");
      CHECK(fused->operation == Operation::kBackwardFused);
      CHECK(serving_kernel_families(Operation::kBackwardFused, dtype, head_dim, "sm_80").empty());
    }
    CHECK(select_kernel_family(Operation::kBackwardFused, dtype, 256, "sm_90a").family->name ==
          "bwd-wgmma-split");
    CHECK(serving_kernel_families(Operation::kBackwardFused, dtype, 256, "sm_80").empty());
    for (int head_dim : {32, 192})
      CHECK(serving_kernel_families(Operation::kBackwardFused, dtype, head_dim, "sm_90a").empty());
  }
  CHECK(serving_kernel_families(Operation::kBackwardFused, DType::kFloat32, 64, "sm_90a").empty());
  CHECK(std::string(to_string(Operation::kBackwardFused)) == "backward-fused");
  CHECK(portable_family(Operation::kBackward, DType::kBFloat16).name == "bwd-mma");
  CHECK(portable_family(Operation::kBackward, DType::kFloat16).name == "bwd-mma");
  CHECK(portable_family(Operation::kBackwardDq, DType::kBFloat16).name == "bwd-dq-mma");
  CHECK(portable_family(Operation::kBackward, DType::kFloat32).name == "bwd-simt");
  CHECK(portable_family(Operation::kBackwardDq, DType::kFloat32).name == "bwd-dq-simt");
  CHECK(portable_family(Operation::kBackwardPrep, DType::kFloat32).name == "bwd-prep");
  CHECK(portable_family(Operation::kBackwardDqConvert, DType::kFloat16).name == "bwd-dq-convert");
  CHECK(std::string(to_string(Operation::kBackward)) == "backward");
  // Backward families never serve a forward call.
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    CHECK(portable_family(Operation::kForward, dtype).operation == Operation::kForward);
}

TEST_CASE("backward tiles: the kernels' own rules refuse what they cannot build, naming the field") {
  const KernelFamily& main = portable_family(Operation::kBackward, DType::kBFloat16);
  CHECK(main.check_config(DType::kBFloat16, 64, {64, 64, 4, 2}, kSmemBytesSm80) == "");
  CHECK(main.check_config(DType::kBFloat16, 64, {64, 48, 4, 2}, kSmemBytesSm80).find("block_n") == 0);
  CHECK(main.check_config(DType::kBFloat16, 64, {24, 64, 4, 2}, kSmemBytesSm80).find("block_m") == 0);
  // d = 256 with one warp per 16 keys holds 256 dK/dV accumulators: over the register budget.
  CHECK(main.check_config(DType::kBFloat16, 256, {32, 64, 4, 2}, kSmemBytesSm80).find("block_m/block_n") ==
        0);
  // The fused kernel takes 64 or 128 queries of 128 keys in 12 warps: not bwd-wgmma's d=64 default.
  const KernelFamily& fused = *find_kernel_family("bwd-wgmma-fused");
  CHECK(fused.check_config(DType::kBFloat16, 64, {64, 128, 12, 3}, kSmemBytesSm90) == "");
  CHECK(fused.check_config(DType::kBFloat16, 64, {112, 128, 12, 2}, kSmemBytesSm90).find("block_m") == 0);
  // The d = 256 kernel has one tile (one or two Q buffers).
  const KernelFamily& split = *find_kernel_family("bwd-wgmma-split");
  CHECK(split.check_config(DType::kBFloat16, 256, {64, 64, 12, 1}, kSmemBytesSm90) == "");
  CHECK(split.check_config(DType::kBFloat16, 256, {64, 64, 12, 3}, kSmemBytesSm90).find("stages") == 0);
  CHECK(split.check_config(DType::kBFloat16, 256, {64, 128, 12, 2}, kSmemBytesSm90).find("block_n") == 0);
  CHECK(split.check_config(DType::kBFloat16, 256, {128, 64, 12, 2}, kSmemBytesSm90).find("block_m") == 0);
  const KernelFamily& rows = portable_family(Operation::kBackwardPrep, DType::kFloat32);
  CHECK(rows.check_config(DType::kFloat32, 64, {16, 2, 4, 1}, kSmemBytesSm80).find("block_n") == 0);
  CHECK(rows.check_config(DType::kFloat32, 64, {6, 1, 4, 1}, kSmemBytesSm80).find("block_m") == 0);
}

TEST_CASE(
    "every default backward specialization compiles for sm_80 and sm_90a (where it runs) without spills or "
    "serialized wgmma") {
  test::ConfigOverride config(memory_only_config());
  std::vector<Job> jobs;
  for (const KernelFamily* family : kernel_families()) {
    // The backward's five operations; the forward and decode families have suites of their own.
    if (!is_backward(family->operation)) continue;
    for (DType dtype : family->dtypes)
      for (int head_dim : kHeadDims)
        for (MaskKind mask : kMasks) {
          if (mask != MaskKind::kNone && !has_mask_argument(*family)) continue;
          if (!family->serves_head_dim(head_dim) || !sampled(*family, dtype, head_dim, mask)) continue;
          for (const char* arch : kArchs) {
            if (!family->arch_mismatch(arch).empty()) continue;
            const std::size_t smem = std::string(arch) == "sm_80" ? kSmemBytesSm80 : kSmemBytesSm90;
            for (const TileConfig& tile : family->default_configs(dtype, head_dim, mask, smem)) {
              Job job;
              job.spec = {dtype, head_dim, mask, tile, family};
              job.arch = arch;
              jobs.push_back(std::move(job));
            }
          }
        }
  }
  REQUIRE(jobs.size() >= 100);
  CHECK(std::count_if(jobs.begin(), jobs.end(), [](const Job& job) {
          return job.spec.family->operation == Operation::kBackwardFused;
        }) == 10);

  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      try {
        jobs[i].info = compile_kernel(jobs[i].spec, jobs[i].arch);
      } catch (const std::exception& e) {
        jobs[i].error = e.what();
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();

  for (const Job& job : jobs) {
    const KernelFamily& family = *job.spec.family;
    INFO(family.name << " " << to_string(job.spec.dtype) << " d=" << job.spec.head_dim << " "
                     << to_string(job.spec.mask) << " " << to_string(job.spec.tile) << " " << job.arch);
    const std::size_t smem = job.arch == "sm_80" ? kSmemBytesSm80 : kSmemBytesSm90;
    CHECK(family.check_config(job.spec.dtype, job.spec.head_dim, job.spec.tile, smem) == "");
    CHECK(job.error == "");
    if (!job.info) continue;
    const CompiledKernelInfo& info = *job.info;
    INFO("registers=" << info.resources.registers << " stack_frame_bytes=" << info.resources.stack_frame_bytes
                      << " wgmma serialized: " << info.resources.wgmma_serialized_reason);
    CHECK(info.name_expression == family.name_expression(job.spec));
    CHECK_FALSE(info.lowered_name.empty());
    CHECK(info.resources.registers > 0);
    CHECK(info.resources.spill_store_bytes == 0);
    CHECK(info.resources.spill_load_bytes == 0);
    CHECK_FALSE(info.resources.wgmma_serialized);
  }
}

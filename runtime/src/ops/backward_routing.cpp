#include "ops/backward_routing.hpp"

#include <vector>

#include "driver/driver_api.hpp"
#include "flashrtc/config_resolution.hpp"

namespace flashrtc::detail {

bool takes_fused_backward(const FusedBackwardQuery& q, std::string_view arch, unsigned traits) {
  // Cheapest checks first: deterministic calls never scan the family table.
  if (q.deterministic) return false;
  const bool has_config = q.config && q.config->has_value();
  // Below these key lengths the two-kernel pipeline ran as fast or faster on an H200 (bf16, d = 64 and 128:
  // docs/measurements/backward/fused_dq.md): few query blocks per key block leave the fused kernel's dQ
  // hand-offs little to overlap. A length not known (0) is judged long; an explicit tile decides alone. The
  // rule holds against a Hopper main kernel; where none serves the call (d = 256: the mma.sync one), the
  // fused kernel runs at every length.
  const std::int64_t min_seqlen_kv = q.mask == MaskKind::kNone ? 2048 : 4096;
  if (!has_config && q.seqlen_kv > 0 && q.seqlen_kv < min_seqlen_kv) {
    const std::vector<const KernelFamily*> two_kernel =
        serving_kernel_families(q.two_kernel, q.dtype, q.head_dim, arch, traits);
    if (two_kernel.empty() || two_kernel.front()->needs_arch_specific) return false;
  }
  const std::vector<const KernelFamily*> families =
      serving_kernel_families(q.fused, q.dtype, q.head_dim, arch, traits);
  if (families.empty()) return false;
  // An explicit tile names the kernel: the fused one wherever its family takes the tile.
  return !has_config ||
         families.front()->check_config(q.dtype, q.head_dim, **q.config, kSmemBytesSm90).empty();
}

std::string main_tile_problem(const FusedBackwardQuery& q, const TileConfig& tile) {
  std::string reason = check_config_any_family(q.two_kernel, q.dtype, q.head_dim, tile, kSmemBytesSm90);
  if (!reason.empty() && !q.deterministic &&
      check_config_any_family(q.fused, q.dtype, q.head_dim, tile, kSmemBytesSm90).empty())
    reason.clear();
  return reason;
}

BackwardScratch backward_scratch(std::size_t rows, std::size_t dq_floats, CUstream stream) {
  const std::size_t d_rows_bytes = scratch_aligned(rows * sizeof(float));
  BackwardScratch s;
  s.owner = Scratch::on_stream(d_rows_bytes + dq_floats * sizeof(float), stream);
  s.d_rows = reinterpret_cast<float*>(s.owner.data());
  if (dq_floats > 0) {
    s.dq_accum = reinterpret_cast<float*>(s.owner.data() + d_rows_bytes);
    FLASHRTC_CU_CHECK(cuMemsetD32Async, reinterpret_cast<CUdeviceptr>(s.dq_accum), 0, dq_floats, stream);
  }
  return s;
}

}  // namespace flashrtc::detail

#pragma once
/// What the tuner sweeps: the forward family's configurations that fit a device, how many blocks of a
/// compiled kernel an SM holds, and the specializations a deployment warms.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashrtc/device.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

/// The per-block and per-SM limits that decide whether a block launches and how many stay resident.
struct SmLimits {
  int max_threads_per_block = 1024;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int registers_per_sm = 64 * 1024;
  int max_registers_per_thread = 255;
  std::size_t smem_per_block_bytes = kSmemBytesSm80;  ///< opt-in maximum of one block
  std::size_t smem_per_sm_bytes = 164 * 1024;
  std::size_t reserved_smem_per_block_bytes = 1024;  ///< taken by CUDA from the SM's shared memory per block
};

/// The device's own limits.
FLASHRTC_API SmLimits sm_limits(const DeviceInfo& device);
/// Published limits of an arch, for machines without its GPU: sm_80/87 and sm_90+ data-center parts have
/// 164/228 KB of shared memory per SM and 2048 threads; other archs (sm_86, sm_89, sm_120) 100 KB and 1536.
FLASHRTC_API SmLimits assumed_sm_limits(const std::string& arch);

/// Blocks of a kernel resident on one SM: the least of what threads, registers (allocated per warp in units
/// of 256), shared memory (plus the per-block reservation) and the block limit allow. 0 means it cannot
/// launch. registers_per_thread = 0 leaves registers out (not compiled yet).
FLASHRTC_API int resident_blocks_per_sm(const SmLimits& limits, int threads, int registers_per_thread,
                                        std::size_t smem_bytes);
/// Resident warps over the SM's maximum, in [0, 1].
FLASHRTC_API double occupancy(const SmLimits& limits, int threads, int resident_blocks);

enum class TuneSpace : int { kQuick = 0, kFull = 1 };
FLASHRTC_API const char* to_string(TuneSpace space);  ///< "quick", "full"
FLASHRTC_API std::optional<TuneSpace> parse_tune_space(std::string_view name);

/// The configurations `flashrtc tune` tries for a call, in table order (block_m, block_n, warps, stages).
/// kFull: every configuration of the family (forward_config_space, and the built-in default of every mask)
/// whose shared memory and threads fit limits with at least one resident block. kQuick: of those, the tiles
/// no larger than the sequence lengths' buckets whose area (block_m x block_n) is at least a quarter of the
/// largest such area and whose sides are within a factor of two (large square-ish tiles reuse Q, K and V the
/// most, which wins at the lengths worth tuning), plus the built-in default of every mask. arch: the defaults
/// are arch's where the family's table gives an arch its own (empty: the arch-independent ones).
FLASHRTC_API std::vector<TileConfig> tuning_candidates(const KernelFamily& family, DType dtype, int head_dim,
                                                       std::int64_t seqlen_q, std::int64_t seqlen_kv,
                                                       TuneSpace space, const SmLimits& limits,
                                                       std::string_view arch = {});
/// The same for the portable family of dtype.
FLASHRTC_API std::vector<TileConfig> tuning_candidates(DType dtype, int head_dim, std::int64_t seqlen_q,
                                                       std::int64_t seqlen_kv, TuneSpace space,
                                                       const SmLimits& limits);

/// The head dims `flashrtc compile --all` warms for a family: 32, 64, 96, 128, 256 and each default row's
/// bound (the Hopper family's rows for d = 160-224), those the family serves, ascending.
FLASHRTC_API std::vector<int> warm_head_dims(const KernelFamily& family);

/// What `flashrtc compile --all` warms for arch: for every family that runs on arch (forward and backward
/// kernels alike), every dtype it takes x head dim of warm_head_dims x mask (once for a kernel without
/// a mask argument) with the mask's default tile for arch's shared memory (and the short-key-sequence default
/// where it differs), then every tuned entry of the tuning database for arch and this NVRTC version (unless
/// with_tuned is false), without duplicates; the defaults come first.
FLASHRTC_API std::vector<KernelSpec> warm_specs(const std::string& arch, bool with_tuned = true);
[[deprecated("renamed warm_specs: it warms every operation's kernels")]] inline std::vector<KernelSpec>
warm_forward_specs(const std::string& arch, bool with_tuned = true) {
  return warm_specs(arch, with_tuned);
}

}  // namespace flashrtc

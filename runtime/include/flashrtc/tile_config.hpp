#pragma once
/// Tile configurations. Each kernel family (kernel_family.hpp) owns its tile axes, its rules and its default
/// table; the functions below answer for the portable family of a dtype (the one every GPU flashrtc targets
/// runs), for callers that name no family.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashrtc/export.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

struct TileConfig {
  int block_m = 64;  ///< query rows per thread block
  int block_n = 64;  ///< key rows per pipeline stage
  int warps = 4;     ///< warps per thread block
  int stages = 2;    ///< K/V tiles resident in shared memory (1: K and V alternate; 2: double buffered)
  bool operator==(const TileConfig& o) const {
    return block_m == o.block_m && block_n == o.block_n && warps == o.warps && stages == o.stages;
  }
};

/// "block_m=64,block_n=64,warps=4,stages=2".
FLASHRTC_API std::string to_string(const TileConfig& config);

/// The largest head dim any forward family takes.
inline constexpr int kMaxHeadDim = 256;
/// Opt-in shared memory per block on sm_80 (163 KB) is the smallest of the GPUs we target; sm_90 allows 227 KB.
inline constexpr std::size_t kSmemBytesSm80 = 163 * 1024;
inline constexpr std::size_t kSmemBytesSm90 = 227 * 1024;

/// Shared memory the portable forward kernel needs for this element type, head dim and tile.
FLASHRTC_API std::size_t forward_smem_bytes(DType dtype, int head_dim, const TileConfig& config);

/// Empty when config is one the kernel can be built with for head_dim under smem_limit_bytes; otherwise
/// the reason, naming the field ("block_n=48: must be ...").
FLASHRTC_API std::string check_forward_config(DType dtype, int head_dim, const TileConfig& config,
                                              std::size_t smem_limit_bytes);

/// Every configuration of the family that the checks above accept (what the tuner sweeps).
FLASHRTC_API std::vector<TileConfig> forward_config_space(DType dtype, int head_dim, std::size_t smem_limit_bytes);

/// The built-in default for a head dim and mask, from the shared table (KernelFamily::default_config): the
/// fastest measured tile that fits smem_limit_bytes (the device's opt-in limit; sm_80's by default, which
/// every GPU we target has) and that ptxas for arch (empty: judged as sm_80) fits within kDefaultMaxRegisters
/// registers without spills. seqlen_kv, when known (> 0), steers short key sequences away from key tiles that
/// would waste much of their last pass.
FLASHRTC_API TileConfig default_forward_config(DType dtype, int head_dim, MaskKind mask,
                                               std::size_t smem_limit_bytes = kSmemBytesSm80,
                                               std::int64_t seqlen_kv = 0, std::string_view arch = {});

/// Every tile default_forward_config can return for dtype, head_dim, mask, smem_limit_bytes and arch,
/// whatever the key length: the one for long (or unknown) sequences first. What a warmed cache and the tuner
/// must include.
FLASHRTC_API std::vector<TileConfig> default_forward_configs(DType dtype, int head_dim, MaskKind mask,
                                                             std::size_t smem_limit_bytes,
                                                             std::string_view arch = {});

/// Head dims the forward kernel accepts: multiples of 8 from 8 to kMaxHeadDim.
constexpr bool is_supported_head_dim(int head_dim) {
  return head_dim >= 8 && head_dim <= kMaxHeadDim && head_dim % 8 == 0;
}

}  // namespace flashrtc

#pragma once
/// Tile questions for callers that name no family: each kernel family (kernel_family.hpp) owns its tile
/// axes, its rules and its default table; the functions below answer for the portable family of a dtype (the
/// one every GPU flashrtc targets runs). TileConfig itself is in tile.hpp.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashrtc/export.hpp"
#include "flashrtc/tile.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

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

}  // namespace flashrtc

#include "flashrtc/tile_config.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "flashrtc/mma_forward_shape.cuh"
#include "flashrtc/simt_forward_shape.cuh"

namespace flashrtc {

namespace {

SimtForwardShape simt_shape(int head_dim, const TileConfig& c) { return {head_dim, c.block_m, c.block_n, c.warps, c.stages}; }
MmaForwardShape mma_shape(int head_dim, const TileConfig& c) { return {head_dim, c.block_m, c.block_n, c.warps, c.stages}; }

// The family's own reason a shape is invalid, and its shared memory; both come from the constexpr shape
// structs the kernels static_assert.
const char* invalid_reason(DType dtype, int head_dim, const TileConfig& c) {
  return forward_kernel_family(dtype) == KernelFamily::kMma ? mma_shape(head_dim, c).invalid_reason()
                                                            : simt_shape(head_dim, c).invalid_reason();
}

// The default tile per head dim: the first row whose max_head_dim covers the call, and in it the first
// candidate that fits the shared memory at hand. Figures: fp32, B=2 H=16 N=4096 on an H200 (docs/PERFORMANCE.md).
// Every default compiles without spills for sm_80 and sm_90a (tests/cpu checks it).
struct DefaultCandidate {
  TileConfig tile;
  // The candidate is taken only on GPUs with at least this much opt-in shared memory per block. Besides
  // fitting the tile, it stands for the GPU generation: ptxas for sm_90 (227 KB) fits the widest tiles in
  // 255 registers while ptxas for sm_80 (163 KB) spills them.
  std::size_t min_smem_limit = 0;
  // ... and only for key sequences at least this long (or of unknown length): a key tile that does not divide
  // short sequences wastes much of its last pass (96-key tiles over 512 keys: 12.5%).
  std::int64_t min_seqlen_kv = 0;
};
struct DefaultTile {
  int max_head_dim;
  DefaultCandidate candidates[2];
  const char* why;
};
constexpr DefaultCandidate kNoTile{{0, 0, 0, 0}};
constexpr DefaultTile kSimtDefaultTiles[] = {
    {32, {{{128, 64, 4, 1}}, kNoTile}, "d=32: 31 TFLOP/s; 64x32 ran 28, 8 warps 19-25 (too few columns per thread)"},
    {64, {{{64, 64, 4, 1}}, kNoTile}, "d=64: 35 TFLOP/s; 128x64 ran 36 but spills 16-bit tiles (128 accumulators)"},
    {128, {{{128, 64, 8, 1}}, {{64, 32, 4, 1}}},
     "d=128: 128x64 ran 39 but needs 170 KB in fp32, over sm_80's 163 KB; 64x32 ran 34"},
    {256, {{{64, 64, 8, 1}}, {{64, 32, 8, 1}}},
     "d=256: 64x64 ran 33 but needs 217 KB in fp32; 64x32 ran 28; larger tiles pass 128 accumulators"},
};

// Tensor-core family (fp16/bf16): bf16 on an H200 at the standard grid's B = 16384 / N, H = 2048 / d, N = 4096
// (docs/PERFORMANCE.md). 4 warps of 32 query rows each, two blocks per SM, K and V double buffered. Every
// default compiles without spills for its arch (tests/cpu checks sm_80 and sm_90a).
constexpr DefaultTile kMmaDefaultTiles[] = {
    {32, {{{128, 64, 4, 2}}, kNoTile}, "d=32: the d=64 shape with fewer registers (189-203)"},
    {64, {{{128, 96, 4, 2}, kSmemBytesSm90, 1024}, {{128, 64, 4, 2}}},
     "d=64: 128x96 ran 326 TFLOP/s (causal 293), 128x64 323 (280); at N=512 128x96 ran 249 against sdpa-flash's 264"},
    {96, {{{128, 64, 4, 2}}, kNoTile}, "d=96: 324 (causal 295); 128x48 ran 309 (276), 128x96 297 but spills"},
    {128, {{{128, 64, 4, 2}, kSmemBytesSm90}, {{128, 32, 4, 2}}}, "d=128: 128x64 ran 372 (causal 323), 128x32 344 (293), 64x64 325"},
    {256, {{{64, 32, 4, 2}}, kNoTile}, "d=256: 302; 64x64 with one stage ran 325 but spills 8 bytes"},
};

// The table row for head_dim: the first whose max_head_dim covers it (the last for larger ones).
template <std::size_t N>
const DefaultTile& row_for(const DefaultTile (&table)[N], int head_dim) {
  for (const DefaultTile& row : table)
    if (head_dim <= row.max_head_dim) return row;
  return *std::prev(std::end(table));
}

const DefaultTile& default_row(DType dtype, int head_dim) {
  return forward_kernel_family(dtype) == KernelFamily::kMma ? row_for(kMmaDefaultTiles, head_dim)
                                                            : row_for(kSimtDefaultTiles, head_dim);
}

}  // namespace

const char* to_string(KernelFamily family) {
  switch (family) {
    case KernelFamily::kSimt: return "simt";
    case KernelFamily::kMma: return "mma";
  }
  return "unknown";
}

KernelFamily forward_kernel_family(DType dtype) {
  return dtype == DType::kFloat32 ? KernelFamily::kSimt : KernelFamily::kMma;
}

std::string to_string(const TileConfig& c) {
  return "block_m=" + std::to_string(c.block_m) + ",block_n=" + std::to_string(c.block_n) +
         ",warps=" + std::to_string(c.warps) + ",stages=" + std::to_string(c.stages);
}

std::size_t forward_smem_bytes(DType dtype, int head_dim, const TileConfig& config) {
  return forward_kernel_family(dtype) == KernelFamily::kMma ? mma_shape(head_dim, config).smem_bytes()
                                                            : simt_shape(head_dim, config).smem_bytes();
}

std::string check_forward_config(DType dtype, int head_dim, const TileConfig& config, std::size_t smem_limit_bytes) {
  if (config.block_m < 1 || config.block_m > 256) return "block_m=" + std::to_string(config.block_m) + ": must be in [1, 256]";
  if (config.block_n < 1 || config.block_n > 256) return "block_n=" + std::to_string(config.block_n) + ": must be in [1, 256]";
  if (const char* reason = invalid_reason(dtype, head_dim, config))
    return std::string(reason) + " (" + to_string(config) + ")";
  const std::size_t smem = forward_smem_bytes(dtype, head_dim, config);
  if (smem > smem_limit_bytes)
    return "shared memory: " + to_string(config) + " needs " + std::to_string(smem) +
           " bytes at d=" + std::to_string(head_dim) + ", over the " + std::to_string(smem_limit_bytes) + " available";
  return {};
}

std::vector<TileConfig> forward_config_space(DType dtype, int head_dim, std::size_t smem_limit_bytes) {
  std::vector<TileConfig> space;
  const bool mma = forward_kernel_family(dtype) == KernelFamily::kMma;
  const std::vector<int> block_ms = mma ? std::vector<int>{32, 64, 128, 256} : std::vector<int>{16, 32, 64, 128};
  for (int block_m : block_ms)
    for (int block_n : mma ? std::vector<int>{16, 32, 48, 64, 96, 128} : std::vector<int>{16, 32, 64, 128})
      for (int warps : {2, 4, 8})
        for (int stages : {1, 2}) {
          const TileConfig config{block_m, block_n, warps, stages};
          if (check_forward_config(dtype, head_dim, config, smem_limit_bytes).empty()) space.push_back(config);
        }
  return space;
}

TileConfig default_forward_config(DType dtype, int head_dim, std::size_t smem_limit_bytes, std::int64_t seqlen_kv) {
  const DefaultTile& row = default_row(dtype, head_dim);
  for (const DefaultCandidate& candidate : row.candidates)
    if (candidate.tile.block_m > 0 && smem_limit_bytes >= candidate.min_smem_limit &&
        (seqlen_kv <= 0 || seqlen_kv >= candidate.min_seqlen_kv) &&
        forward_smem_bytes(dtype, head_dim, candidate.tile) <= smem_limit_bytes)
      return candidate.tile;
  // Nothing fits: the last real candidate, whose shared-memory error the launch will report.
  return row.candidates[1].tile.block_m > 0 ? row.candidates[1].tile : row.candidates[0].tile;
}

std::vector<TileConfig> default_forward_configs(DType dtype, int head_dim, std::size_t smem_limit_bytes) {
  // Key lengths where the choice can change: unknown (or long), and just below each candidate's minimum.
  std::vector<std::int64_t> lengths = {0};
  for (const DefaultCandidate& candidate : default_row(dtype, head_dim).candidates)
    if (candidate.min_seqlen_kv > 1) lengths.push_back(candidate.min_seqlen_kv - 1);
  std::vector<TileConfig> tiles;
  for (std::int64_t seqlen_kv : lengths) {
    const TileConfig tile = default_forward_config(dtype, head_dim, smem_limit_bytes, seqlen_kv);
    if (std::find(tiles.begin(), tiles.end(), tile) == tiles.end()) tiles.push_back(tile);
  }
  return tiles;
}

}  // namespace flashrtc

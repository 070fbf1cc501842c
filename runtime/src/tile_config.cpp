#include "flashrtc/tile_config.hpp"

#include <iterator>

#include "flashrtc/simt_forward_shape.cuh"

namespace flashrtc {

namespace {

SimtForwardShape shape_of(DType dtype, int head_dim, const TileConfig& c) {
  return {head_dim, c.block_m, c.block_n, c.warps, c.stages, static_cast<int>(dtype_size(dtype))};
}

// The default tile per head dim: the first row whose max_head_dim covers the call. Every default must fit
// sm_80's 163 KB of shared memory and compile without spills (tests/cpu checks both).
struct DefaultTile {
  int max_head_dim;
  TileConfig config;
  const char* limit;  // why not larger
};
constexpr DefaultTile kDefaultTiles[] = {
    // 8 warps keep 16 row groups of 4 rows; S 4x4 and O 4x(d/16) per thread stay under ~180 registers.
    {64, {64, 64, 8, 2}, "fp32 d=64: 2 stages = 2*2*64*68*4 + Q + P = 104 KB, two blocks per SM on sm_90"},
    {128, {64, 64, 8, 1}, "d=128: one K/V stage; two would need 186 KB in fp32, over sm_80's 163 KB"},
    {256, {64, 32, 8, 1}, "d=256: O is 4x16 per thread; block_n=64 needs 202 KB of fp32 tiles"},
};

}  // namespace

std::string to_string(const TileConfig& c) {
  return "block_m=" + std::to_string(c.block_m) + ",block_n=" + std::to_string(c.block_n) +
         ",warps=" + std::to_string(c.warps) + ",stages=" + std::to_string(c.stages);
}

std::size_t forward_smem_bytes(DType dtype, int head_dim, const TileConfig& config) {
  return shape_of(dtype, head_dim, config).smem_bytes();
}

std::string check_forward_config(DType dtype, int head_dim, const TileConfig& config, std::size_t smem_limit_bytes) {
  if (config.block_m < 1 || config.block_m > 256) return "block_m=" + std::to_string(config.block_m) + ": must be in [1, 256]";
  if (config.block_n < 1 || config.block_n > 256) return "block_n=" + std::to_string(config.block_n) + ": must be in [1, 256]";
  const SimtForwardShape shape = shape_of(dtype, head_dim, config);
  if (const char* reason = shape.invalid_reason()) return std::string(reason) + " (" + to_string(config) + ")";
  if (shape.smem_bytes() > smem_limit_bytes)
    return "shared memory: " + to_string(config) + " needs " + std::to_string(shape.smem_bytes()) +
           " bytes at d=" + std::to_string(head_dim) + ", over the " + std::to_string(smem_limit_bytes) + " available";
  return {};
}

std::vector<TileConfig> forward_config_space(DType dtype, int head_dim, std::size_t smem_limit_bytes) {
  std::vector<TileConfig> space;
  for (int block_m : {16, 32, 64, 128})
    for (int block_n : {16, 32, 64, 128})
      for (int warps : {2, 4, 8})
        for (int stages : {1, 2}) {
          const TileConfig config{block_m, block_n, warps, stages};
          if (check_forward_config(dtype, head_dim, config, smem_limit_bytes).empty()) space.push_back(config);
        }
  return space;
}

TileConfig default_forward_config(DType /*dtype*/, int head_dim) {
  for (const DefaultTile& row : kDefaultTiles)
    if (head_dim <= row.max_head_dim) return row.config;
  return std::prev(std::end(kDefaultTiles))->config;
}

}  // namespace flashrtc

#pragma once
/// Tile configurations and the limits every family's tiles live under: vocabulary of the call's parameters
/// (an explicit tile), the family table, config resolution and the tuner.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flashrtc/export.hpp"

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

/// Head dims the forward kernel accepts: multiples of 8 from 8 to kMaxHeadDim.
constexpr bool is_supported_head_dim(int head_dim) {
  return head_dim >= 8 && head_dim <= kMaxHeadDim && head_dim % 8 == 0;
}

/// The largest bucket: 2^62, the largest power of two an int64 holds with room to double.
inline constexpr std::int64_t kMaxSeqlenBucket = std::int64_t{1} << 62;

/// The smallest power of two >= seqlen: 3000 and 4096 share the bucket 4096, 4097 does not; 1 for
/// seqlen <= 1. Default tiles, persistent grids and tuned entries are chosen per bucket, so nearby lengths
/// share them. Throws Error(kInvalidArgument) naming the range for seqlen > kMaxSeqlenBucket.
FLASHRTC_API std::int64_t seqlen_bucket(std::int64_t seqlen);

}  // namespace flashrtc

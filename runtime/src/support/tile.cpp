#include "flashrtc/tile.hpp"

#include "flashrtc/error.hpp"

namespace flashrtc {

std::string to_string(const TileConfig& c) {
  return "block_m=" + std::to_string(c.block_m) + ",block_n=" + std::to_string(c.block_n) +
         ",warps=" + std::to_string(c.warps) + ",stages=" + std::to_string(c.stages);
}

std::int64_t seqlen_bucket(std::int64_t seqlen) {
  if (seqlen > kMaxSeqlenBucket)
    throw Error(ErrorCode::kInvalidArgument, "seqlen=" + std::to_string(seqlen) +
                                                 ": tuning buckets cover sequence lengths from 1 to " +
                                                 std::to_string(kMaxSeqlenBucket));
  std::int64_t bucket = 1;
  while (bucket < seqlen) bucket *= 2;
  return bucket;
}

}  // namespace flashrtc

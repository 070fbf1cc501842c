#pragma once
// What `flashrtc bench --op bwd` and `flashrtc tune --op bwd` time: the backward of a forward point, with the
// forward's o and lse from one forward run and a random dO, so that the timed call sees the inputs a training
// step hands it.
#include <cstdint>
#include <vector>

#include "flashrtc/attention.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/device_memory.hpp"

namespace flashrtc::tools {

/// The backward call of forward's shape, dtype, mask, layout, scale and tile (pointers left null): what FLOPs
/// and validation read.
BackwardParams backward_of(const ForwardParams& forward);

/// The deterministic flag of a backward call in which kernel, given an explicit tile, is certain to run:
/// false for kBackwardFused (it serves only non-deterministic calls), true for kBackward and kBackwardDq (a
/// non-deterministic call would run the fused kernel instead where a fused family takes the tile).
bool deterministic_for(Operation kernel);

/// Device buffers of one backward point. Construction runs the forward once (on the legacy stream, then
/// synchronizes), so it needs a device; throws what attention_forward throws.
class BackwardBench {
 public:
  /// forward: a valid call on device buffers q, k, v (its o and lse are replaced by this object's own).
  /// staging: host scratch for the random dO.
  BackwardBench(const ForwardParams& forward, bool deterministic, std::uint64_t seed,
                std::vector<unsigned char>& staging);
  const BackwardParams& params() const { return params_; }

 private:
  DeviceBuffer o_, lse_, d_o_, d_q_, d_k_, d_v_;
  BackwardParams params_;
};

}  // namespace flashrtc::tools

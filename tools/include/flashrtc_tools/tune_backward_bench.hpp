#pragma once
// `flashrtc tune --op bwd`, stage 2: the backward call's buffers for timing, rotated so that L2 never holds a
// launch's inputs, as the forward's TimingBuffers are.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashrtc/flashrtc.hpp"
#include "flashrtc_tools/backward_bench.hpp"
#include "flashrtc_tools/tune_bench.hpp"

namespace flashrtc::tools {

/// Sets of q, k, v and the backward's o, lse, dO, dQ, dK, dV for the backward of shape: together more than
/// twice the L2 (at least two sets), within 3/4 of device memory. Each set's o and lse come from one forward
/// run on its q, k, v.
class BackwardTimingBuffers {
 public:
  BackwardTimingBuffers(const ForwardParams& shape, std::size_t l2_bytes, std::size_t device_bytes,
                        std::uint64_t seed);
  std::size_t sets() const { return sets_.size(); }
  std::size_t total_bytes() const { return sets_.size() * set_bytes_; }
  /// The backward call of set (launch % sets()).
  const BackwardParams& params(std::size_t launch) const {
    return sets_[launch % sets_.size()].bench.params();
  }

 private:
  struct Set {
    DeviceBuffer q, k, v;
    BackwardBench bench;
  };
  std::vector<Set> sets_;
  std::size_t set_bytes_ = 0;
};

/// time_candidate's protocol for whole backward calls with tile as the explicit tile of kernel's kernel
/// (explicit_tile: kBackwardFused or kBackward, the main kernel; kBackwardDq, the dQ pass), in calls that run
/// it (deterministic_for).
Timing time_backward_candidate(Operation kernel, const TileConfig& tile, const BackwardTimingBuffers& buffers,
                               int warmup, int repeats, void* stream);

}  // namespace flashrtc::tools

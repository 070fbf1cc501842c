#pragma once
// `flashrtc tune`, stage 2 (on the GPU): check a candidate against the Eigen reference on a small problem,
// then time it with CUDA events on buffers that rotate so that L2 never holds the inputs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashrtc/flashrtc.hpp"

namespace flashrtc::tools {

/// The small problem a candidate is checked on: batch 1, two heads, the tuned call's dtype, head dim and
/// mask, and its sequence lengths scaled down (ratio kept) to at most 333 (ragged against every tile).
ForwardParams check_problem(const ForwardParams& tuned);

struct CheckOutcome {
  bool pass = false;
  std::string report;  ///< the per-head comparison (forward_check's), for a failure's details
};

/// Fresh random inputs (seed), outputs poisoned with NaN, one launch of tile, and o and lse compared with
/// the double reference by the repository's tolerance rule. Throws Error when the launch fails.
CheckOutcome check_candidate(const ForwardParams& problem, const TileConfig& tile, std::uint64_t seed,
                             void* stream);

/// Sets of q, k, v, o for the tuned shape, enough of them that consecutive launches never find their
/// inputs in L2: together more than twice its size (at least two sets), within 3/4 of device memory.
class TimingBuffers {
 public:
  TimingBuffers(const ForwardParams& shape, std::size_t l2_bytes, std::size_t device_bytes,
                std::uint64_t seed);
  std::size_t sets() const { return sets_.size(); }
  std::size_t total_bytes() const;
  /// p with the pointers of set (launch % sets()).
  ForwardParams bind(ForwardParams p, std::size_t launch) const;

 private:
  struct Set {
    DeviceBuffer q, k, v, o;
  };
  std::vector<Set> sets_;
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

/// warmup untimed calls, then the median of `repeats` calls each timed by its own pair of CUDA events on
/// stream. Before call i (counting every call from 0), prepare(i) runs outside the timing: it can bind the
/// next buffer set for launch().
Timing time_calls(const std::function<void(std::size_t)>& prepare, const std::function<void()>& launch,
                  int warmup, int repeats, void* stream);

/// warmup untimed launches, then the median of `repeats` launches each timed by its own pair of CUDA events,
/// every launch on the next buffer set.
Timing time_candidate(const ForwardParams& shape, const TileConfig& tile, const TimingBuffers& buffers,
                      int warmup, int repeats, void* stream);

}  // namespace flashrtc::tools

#pragma once
// What `flashrtc tune` checks and times for each candidate tile of its operation: the forward call, or the
// backward call (whose main kernel takes the tile), on the tuned shape.
#include <cstdint>
#include <memory>
#include <string>

#include "flashrtc_tools/tune_bench.hpp"
#include "flashrtc_tools/tune_types.hpp"

namespace flashrtc::tools {

class CandidateBench {
 public:
  virtual ~CandidateBench() = default;
  /// The problem each candidate is checked on (check_problem of the tuned shape).
  virtual const ForwardParams& check_shape() const = 0;
  /// What the check compares: "o and lse", "dQ, dK and dV".
  virtual const char* checked_outputs() const = 0;
  virtual std::size_t buffer_sets() const = 0;
  virtual std::size_t buffer_bytes() const = 0;
  /// Fresh inputs from seed, poisoned outputs, one call with tile, compared with the reference.
  virtual CheckOutcome check(const TileConfig& tile, std::uint64_t seed, void* stream) const = 0;
  /// time_candidate's protocol: warmup untimed calls, then the median of `repeats` calls each between its
  /// own CUDA events, every call on the next buffer set.
  virtual Timing time(const TileConfig& tile, int warmup, int repeats, void* stream) const = 0;
};

/// The bench of setup.operation (kForward; kBackward or kBackwardDq: whole backward calls) on device, its
/// buffers filled from seed. Needs the device; throws Error when allocating or the backward's forward run
/// fails.
std::unique_ptr<CandidateBench> make_candidate_bench(const TuneSetup& setup, const DeviceInfo& device,
                                                     std::uint64_t seed);

}  // namespace flashrtc::tools

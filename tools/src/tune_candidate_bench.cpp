#include "flashrtc_tools/tune_candidate_bench.hpp"

#include "flashrtc_tools/backward_check.hpp"
#include "flashrtc_tools/tune_backward_bench.hpp"

namespace flashrtc::tools {

namespace {

class ForwardBench final : public CandidateBench {
 public:
  ForwardBench(const TuneSetup& setup, const DeviceInfo& device, std::uint64_t seed)
      : shape_(setup.shape),
        problem_(check_problem(setup.shape)),
        buffers_(setup.shape, device.l2_cache_bytes, device.global_memory_bytes, seed) {}
  const ForwardParams& check_shape() const override { return problem_; }
  const char* checked_outputs() const override { return "o and lse"; }
  std::size_t buffer_sets() const override { return buffers_.sets(); }
  std::size_t buffer_bytes() const override { return buffers_.total_bytes(); }
  CheckOutcome check(const TileConfig& tile, std::uint64_t seed, void* stream) const override {
    return check_candidate(problem_, tile, seed, stream);
  }
  Timing time(const TileConfig& tile, int warmup, int repeats, void* stream) const override {
    return time_candidate(shape_, tile, buffers_, warmup, repeats, stream);
  }

 private:
  ForwardParams shape_, problem_;
  TimingBuffers buffers_;
};

// Whole backward calls, the tile being that of the kernel tuned (setup.operation: the main kernel or the dQ
// pass); the other kernels keep their own resolution (tuned or default).
class BackwardBenchOfTiles final : public CandidateBench {
 public:
  BackwardBenchOfTiles(const TuneSetup& setup, const DeviceInfo& device, std::uint64_t seed)
      : kernel_(setup.operation),
        problem_(check_problem(setup.shape)),
        buffers_(setup.shape, device.l2_cache_bytes, device.global_memory_bytes, seed) {}
  const ForwardParams& check_shape() const override { return problem_; }
  const char* checked_outputs() const override { return "dQ, dK and dV"; }
  std::size_t buffer_sets() const override { return buffers_.sets(); }
  std::size_t buffer_bytes() const override { return buffers_.total_bytes(); }
  CheckOutcome check(const TileConfig& tile, std::uint64_t seed, void* stream) const override {
    const GradientCheck result = check_backward(problem_, kernel_, tile, seed, stream);
    return {result.pass, result.report};
  }
  Timing time(const TileConfig& tile, int warmup, int repeats, void* stream) const override {
    return time_backward_candidate(kernel_, tile, buffers_, warmup, repeats, stream);
  }

 private:
  Operation kernel_;
  ForwardParams problem_;
  BackwardTimingBuffers buffers_;
};

}  // namespace

std::unique_ptr<CandidateBench> make_candidate_bench(const TuneSetup& setup, const DeviceInfo& device,
                                                     std::uint64_t seed) {
  if (setup.operation != Operation::kForward)
    return std::make_unique<BackwardBenchOfTiles>(setup, device, seed);
  return std::make_unique<ForwardBench>(setup, device, seed);
}

}  // namespace flashrtc::tools

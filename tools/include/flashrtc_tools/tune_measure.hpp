#pragma once
// `flashrtc tune`, stage 2 driven over every compiled candidate: check each against the Eigen reference,
// then time the ones that pass, with a progress display.
#include <cstdint>
#include <vector>

#include "flashrtc_tools/tune_types.hpp"

namespace flashrtc::tools {

/// Checks, then times, every kPending row of rows on device (warmup untimed and `repeats` timed launches
/// each; inputs from seed). A row becomes kOk with its times, kWrong or kLaunchFailed. Returns false when a
/// failure lost the CUDA context: the rows after it are kNotRun.
bool measure_candidates(const TuneSetup& setup, const DeviceInfo& device, int warmup, int repeats,
                        std::uint64_t seed, std::vector<TuneRow>& rows);

}  // namespace flashrtc::tools

#pragma once
// `flashrtc tune`, stage 1: compile every candidate through the cache on host threads (NVRTC is
// thread-safe), then drop the ones whose registers leave no block room on an SM.
#include <vector>

#include "flashrtc_tools/tune_types.hpp"

namespace flashrtc::tools {

/// Compiles the pending rows for setup.arch on `jobs` threads with a progress display; a row that fails
/// becomes kCompileFailed, one that cannot be resident kDoesNotFit, the others get kernel and occupancy.
void compile_candidates(const TuneSetup& setup, std::vector<TuneRow>& rows, unsigned jobs);

}  // namespace flashrtc::tools

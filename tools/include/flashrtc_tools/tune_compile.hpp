#pragma once
// `flashrtc tune`, stage 1: compile every candidate through the cache on host threads (NVRTC is
// thread-safe), then drop the ones whose registers leave no block room on an SM.
#include <vector>

#include "flashrtc_tools/tune_types.hpp"

namespace flashrtc::tools {

/// The kernel a call of setup's shape runs with tile on the swept family, by the runtime's own rule
/// (call_kernel_spec: the grid the family chooses for the call's mask and key length, which can change its
/// shared memory): what `compile` builds for that tile and call, and what the sweep compiles.
KernelSpec candidate_spec(const TuneSetup& setup, const TileConfig& tile);

/// A pending row per tile, with the threads and dynamic shared memory of candidate_spec's launch.
std::vector<TuneRow> candidate_rows(const TuneSetup& setup, const std::vector<TileConfig>& tiles);

/// Compiles the pending rows for setup.arch on `jobs` threads with a progress display; a row that fails
/// becomes kCompileFailed, one that cannot be resident kDoesNotFit, the others get kernel and occupancy.
void compile_candidates(const TuneSetup& setup, std::vector<TuneRow>& rows, unsigned jobs);

}  // namespace flashrtc::tools

#pragma once
// Parses ptxas's -v report (in the NVRTC log) for one kernel.
#include <string>

#include "flashrtc/compiled_kernel.hpp"

namespace flashrtc::detail {

// The report lines for `lowered_name`: registers, spill store/load bytes, stack frame, static shared memory,
// barriers, and whether ptxas serialized its wgmma pipeline (with the reason it gave). Throws
// Error(kInternal) when the log holds no report for that kernel (ptxas -v missing).
ResourceReport parse_ptxas_report(const std::string& log, const std::string& lowered_name);

}  // namespace flashrtc::detail

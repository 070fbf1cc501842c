#pragma once
// `flashrtc tune --plot FILE`: the sweep as a heat map of TFLOP/s over block M x block N (the best over
// warps and stages in each cell; cells where every candidate failed say so), drawn by render_plot.
#include <vector>

#include "flashrtc_tools/plot.hpp"
#include "flashrtc_tools/tune_types.hpp"

namespace flashrtc::tools {

/// The heat map of rows; cells sit on an even grid of the block sizes swept.
Figure tune_figure(const TuneSetup& setup, const std::vector<TuneRow>& rows);

}  // namespace flashrtc::tools

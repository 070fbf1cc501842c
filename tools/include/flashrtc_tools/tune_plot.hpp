#pragma once
// `flashrtc tune --plot FILE`: the sweep as a heat map of TFLOP/s over block M x block N (the best over
// warps and stages in each cell), drawn by gnuplot. FILE.gp keeps the script with its data, so the figure
// can be redrawn or restyled; a FILE ending in .gp asks for the script alone.
#include <string>
#include <vector>

#include "flashrtc_tools/tune_types.hpp"

namespace flashrtc::tools {

/// Throws UsageError for an extension gnuplot is not asked to draw (.png, .svg, .pdf, or .gp for the
/// script alone), MissingTool when gnuplot is needed and not installed. Run before the sweep.
void check_plot_target(const std::string& path);

/// The gnuplot script (data inline) for rows; image names what it draws, script_path where it is kept.
std::string plot_script(const TuneSetup& setup, const std::vector<TuneRow>& rows, const std::string& image,
                        const std::string& script_path);

/// Writes path.gp (or path itself for .gp) and draws path with gnuplot. Throws Error(kCacheIo) when a file
/// cannot be written, MissingTool when gnuplot is absent or fails.
void write_plot(const std::string& path, const TuneSetup& setup, const std::vector<TuneRow>& rows);

}  // namespace flashrtc::tools

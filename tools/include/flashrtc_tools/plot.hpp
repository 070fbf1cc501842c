#pragma once
// Drawing a figure for `--plot FILE` (tune, bench) with whatever the machine has: gnuplot, else python3 with
// matplotlib, else neither - then the gnuplot script and its data stay behind with one line saying how to
// draw them. A missing plotter never fails the command.
#include <string>

namespace flashrtc::tools {

/// A figure in the forms the renderers read.
/// - data: what FILE.dat holds: blocks separated by two empty lines (gnuplot's `index`), each opening with a
///   `# title` line, then rows of whitespace-separated numbers.
/// - gnuplot: what FILE.gp holds; render_plot replaces @DATA@ with the data file, @IMAGE@ with the image,
///   @SCRIPT@ with the script's own path and @TERMINAL@ with the gnuplot terminal for the image's extension.
/// - matplotlib: Python run by `python3 -c` after a prelude that imports matplotlib.pyplot as plt (exiting
///   quietly when it cannot) and defines DATA, IMAGE and blocks(), the data file as (title, rows) pairs.
struct Figure {
  std::string data, gnuplot, matplotlib;
};

/// Throws UsageError unless path ends in .png, .svg or .pdf (an image) or .gp (the script and data alone).
void check_plot_target(const std::string& path);

/// gnuplot and Python single-quoted strings: ' becomes '' for gnuplot, \' for Python.
std::string gnuplot_quoted(const std::string& text);
std::string python_quoted(const std::string& text);

/// How a figure ended up, and the one line that tells the user ("plot:      FILE (gnuplot; ...)", or how
/// to draw the script and data left behind).
struct PlotResult {
  enum class Drawn { kGnuplot, kMatplotlib, kNotDrawn } drawn = Drawn::kNotDrawn;
  std::string message;
};

/// Writes path.gp and path.dat (for a path ending in .gp: path and path with .dat), then draws path with
/// gnuplot when it is installed and succeeds, else with python3 and matplotlib, else draws nothing. Throws
/// Error(kCacheIo) only when a file cannot be written; a missing or failing plotter is no error.
PlotResult render_plot(const std::string& path, const Figure& figure);

}  // namespace flashrtc::tools

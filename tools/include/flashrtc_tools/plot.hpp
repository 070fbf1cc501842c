#pragma once
// Drawing a figure for `--plot FILE` (tune, bench) with whatever the machine has: gnuplot, else python3 with
// matplotlib, else neither - then the gnuplot script and its data stay behind with one line saying how to
// draw them. A missing plotter never fails the command.
#include <string>

namespace flashrtc::tools {

/// A figure in the forms the renderers read. The two programs are fixed text: everything that comes from
/// data (titles, labels, numbers) is in the data file, and the paths reach them as arguments
/// (`gnuplot -c FILE.gp FILE.dat IMAGE`, `python3 -c PROGRAM FILE.dat IMAGE`), so no value can become code.
/// - data: what FILE.dat holds: blocks separated by two empty lines (gnuplot's `index`) of tab-separated
///   fields; block 0 is the figure's row, `figure<TAB>title<TAB>...`. Lines starting with # are comments.
///   Text fields pass through plot_text().
/// - gnuplot: the figure's part of FILE.gp, after a prelude that reads the data with a tab separator, picks
///   the terminal from the image's extension, sets the output to ARG2 and the title to block 0's title.
/// - matplotlib: the figure's part of the Python program, after a prelude that imports matplotlib.pyplot as
///   plt (exiting quietly when it cannot) and defines DATA, IMAGE (from argv), TITLE and blocks(): the data
///   file as blocks of rows of fields (strings), comments left out.
struct Figure {
  std::string data;
  const char* gnuplot = "";
  const char* matplotlib = "";
};

/// text as a field of the data file: a control character (a newline would forge rows, a tab fields)
/// becomes '?', and a double quote (gnuplot's field quote) a single one.
std::string plot_text(const std::string& text);

/// Throws UsageError unless path ends in .png, .svg or .pdf (an image) or .gp (the script and data alone).
void check_plot_target(const std::string& path);

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

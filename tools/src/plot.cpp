#include "flashrtc_tools/plot.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "flashrtc/error.hpp"
#include "flashrtc_tools/external_tool.hpp"
#include "flashrtc_tools/tool_errors.hpp"

namespace flashrtc::tools {

namespace {

std::string extension_of(const std::string& path) {
  return std::filesystem::path(path).extension().string();
}

bool is_image(const std::string& extension) {
  return extension == ".png" || extension == ".svg" || extension == ".pdf";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error(ErrorCode::kCacheIo, "--plot: cannot write " + path);
}

// What every gnuplot script starts with (Figure::gnuplot); ARG1 is the data file, ARG2 the image.
constexpr const char* kGnuplotPrelude =
    R"gp(# Written by `flashrtc bench --plot` or `flashrtc tune --plot`; draw with:
#   gnuplot -c THIS_SCRIPT DATA_FILE IMAGE.png (or .svg, .pdf)
set datafile separator "\t"
image_type = strlen(ARG2) >= 4 ? ARG2[strlen(ARG2) - 3:] : ''
if (image_type eq '.svg') {
  set terminal svg size 960,720 dynamic font ',11'
} else {
  if (image_type eq '.pdf') {
    set terminal pdfcairo size 6.4in,4.8in font ',9'
  } else {
    set terminal pngcairo size 960,720 font ',11'
  }
}
set output ARG2
stats ARG1 index 0 using (figure_title = strcol(2), 0) nooutput
set title figure_title noenhanced
)gp";

// What every matplotlib program starts with (Figure::matplotlib).
constexpr const char* kMatplotlibPrelude = R"py(import sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(3)
DATA, IMAGE = sys.argv[1], sys.argv[2]
def blocks():
    with open(DATA, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return [[l.split("\t") for l in b.split("\n") if l and not l.startswith("#")] for b in text.split("\n\n\n")]
TITLE = blocks()[0][0][1]
)py";

// Runs a renderer and says whether it produced image (an old figure never passes for a new one).
bool drew(const std::string& tool, const std::vector<std::string>& args, const std::string& image) {
  std::error_code ignored;
  std::filesystem::remove(image, ignored);
  std::fflush(stdout);
  return run_tool(tool, args) == 0 && std::filesystem::exists(image);
}

// A path as an argument of the renderers: one starting with '-' would read as an option.
std::string argument(const std::string& path) {
  return path.rfind('-', 0) == 0 ? "./" + path : path;
}

}  // namespace

void check_plot_target(const std::string& path) {
  const std::string extension = extension_of(path);
  if (extension != ".gp" && !is_image(extension))
    throw UsageError(
        "--plot " + path +
        ": the file must end in .png, .svg or .pdf (or .gp for the gnuplot script and its data)");
}

std::string plot_text(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) c = '?';
    if (c == '"') c = '\'';
  }
  return out;
}

PlotResult render_plot(const std::string& path, const Figure& figure) {
  check_plot_target(path);
  const bool script_only = extension_of(path) == ".gp";
  const std::string script_path = script_only ? path : path + ".gp";
  const std::string data_path =
      script_only ? std::filesystem::path(path).replace_extension(".dat").string() : path + ".dat";
  // The script alone still names an image to draw: the .gp file's own name with .png.
  const std::string image =
      script_only ? std::filesystem::path(path).replace_extension(".png").string() : path;
  write_file(data_path, figure.data);
  write_file(script_path, std::string(kGnuplotPrelude) + figure.gnuplot);
  const std::string kept = script_path + " and " + data_path;
  const std::vector<std::string> paths = {argument(data_path), argument(image)};
  const std::string draw_command = "gnuplot -c " + script_path + " " + data_path + " " + image;
  if (script_only)
    return {PlotResult::Drawn::kNotDrawn, "plot:      " + kept + " (draw with `" + draw_command + "`)"};
  if (const auto gnuplot = find_tool("gnuplot");
      gnuplot && drew(*gnuplot, {"-c", argument(script_path), paths[0], paths[1]}, image))
    return {PlotResult::Drawn::kGnuplot, "plot:      " + image + " (gnuplot; script and data: " + kept + ")"};
  const std::string program = std::string(kMatplotlibPrelude) + figure.matplotlib;
  if (const auto python = find_tool("python3");
      python && drew(*python, {"-c", program, paths[0], paths[1]}, image))
    return {PlotResult::Drawn::kMatplotlib,
            "plot:      " + image + " (matplotlib; gnuplot script and data: " + kept + ")"};
  return {
      PlotResult::Drawn::kNotDrawn,
      "plot:      " + image + " not drawn: neither gnuplot nor python3 with matplotlib works here; wrote " +
          kept + ": draw them with `" + draw_command +
          "` where gnuplot is installed (apt-get install gnuplot-nox), or install matplotlib (pip install "
          "matplotlib) and run again"};
}

}  // namespace flashrtc::tools

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

const char* terminal_for(const std::string& extension) {
  if (extension == ".png") return "pngcairo size 960,720 font ',11'";
  if (extension == ".svg") return "svg size 960,720 dynamic font ',11'";
  if (extension == ".pdf") return "pdfcairo size 6.4in,4.8in font ',9'";
  return nullptr;
}

std::string replaced(std::string text, const std::string& placeholder, const std::string& value) {
  for (auto at = text.find(placeholder); at != std::string::npos;
       at = text.find(placeholder, at + value.size()))
    text.replace(at, placeholder.size(), value);
  return text;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error(ErrorCode::kCacheIo, "--plot: cannot write " + path);
}

// What every matplotlib script starts with (Figure::matplotlib).
constexpr const char* kMatplotlibPrelude = R"py(import sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(3)
def blocks():
    out = []
    for text in open(DATA).read().split("\n\n\n"):
        lines = [l for l in text.splitlines() if l.strip()]
        title = next((l[1:].strip() for l in lines if l.startswith("#")), "")
        out.append((title, [[float(v) for v in l.split()] for l in lines if not l.startswith("#")]))
    return out
)py";

// Runs a renderer and says whether it produced image (an old figure never passes for a new one).
bool drew(const std::string& tool, const std::vector<std::string>& args, const std::string& image) {
  std::error_code ignored;
  std::filesystem::remove(image, ignored);
  std::fflush(stdout);
  return run_tool(tool, args) == 0 && std::filesystem::exists(image);
}

}  // namespace

void check_plot_target(const std::string& path) {
  const std::string extension = extension_of(path);
  if (extension != ".gp" && !terminal_for(extension))
    throw UsageError(
        "--plot " + path +
        ": the file must end in .png, .svg or .pdf (or .gp for the gnuplot script and its data)");
}

std::string gnuplot_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string python_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
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
  std::string script = figure.gnuplot;
  script = replaced(script, "@DATA@", gnuplot_quoted(data_path));
  script = replaced(script, "@IMAGE@", gnuplot_quoted(image));
  script = replaced(script, "@SCRIPT@", script_path);
  script = replaced(script, "@TERMINAL@", terminal_for(extension_of(image)));
  write_file(script_path, script);
  const std::string kept = script_path + " and " + data_path;
  if (script_only)
    return {PlotResult::Drawn::kNotDrawn,
            "plot:      " + kept + " (draw with `gnuplot " + script_path + "`)"};
  if (const auto gnuplot = find_tool("gnuplot"); gnuplot && drew(*gnuplot, {script_path}, image))
    return {PlotResult::Drawn::kGnuplot, "plot:      " + image + " (gnuplot; script and data: " + kept + ")"};
  const std::string program = "DATA = " + python_quoted(data_path) + "\nIMAGE = " + python_quoted(image) +
                              "\n" + kMatplotlibPrelude + figure.matplotlib;
  if (const auto python = find_tool("python3"); python && drew(*python, {"-c", program}, image))
    return {PlotResult::Drawn::kMatplotlib,
            "plot:      " + image + " (matplotlib; gnuplot script and data: " + kept + ")"};
  return {
      PlotResult::Drawn::kNotDrawn,
      "plot:      " + image + " not drawn: neither gnuplot nor python3 with matplotlib works here; wrote " +
          kept + ": draw them with `gnuplot " + script_path +
          "` where gnuplot is installed (apt-get install gnuplot-nox), or install matplotlib (pip install "
          "matplotlib) and run again"};
}

}  // namespace flashrtc::tools

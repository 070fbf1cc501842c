#include "flashrtc_tools/tune_plot.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "flashrtc_tools/external_tool.hpp"
#include "flashrtc_tools/tool_errors.hpp"

namespace flashrtc::tools {

namespace {

std::string extension_of(const std::string& path) {
  return std::filesystem::path(path).extension().string();
}

// gnuplot single-quoted strings: a quote is doubled.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

const char* terminal_for(const std::string& extension) {
  if (extension == ".png") return "pngcairo size 960,720 font ',11'";
  if (extension == ".svg") return "svg size 960,720 dynamic font ',11'";
  if (extension == ".pdf") return "pdfcairo size 6.4in,4.8in font ',9'";
  return nullptr;
}

constexpr const char* kInstallGnuplot =
    "--plot draws with gnuplot, which is not installed: `apt-get install gnuplot-nox` (Debian/Ubuntu), or "
    "ask "
    "for the script alone with a .gp file and draw it elsewhere";

}  // namespace

void check_plot_target(const std::string& path) {
  const std::string extension = extension_of(path);
  if (extension == ".gp") return;
  if (!terminal_for(extension))
    throw UsageError("--plot " + path +
                     ": the file must end in .png, .svg or .pdf (or .gp for the gnuplot script)");
  if (!find_tool("gnuplot")) throw MissingTool(kInstallGnuplot);
}

std::string plot_script(const TuneSetup& setup, const std::vector<TuneRow>& rows, const std::string& output,
                        const std::string& script_path) {
  // Cells are block sizes placed on an even grid (their values are powers of two or near them).
  std::set<int> ms, ns;
  std::map<std::pair<int, int>, double> best;
  std::set<std::pair<int, int>> failed;  // cells where every candidate failed to compile, check or launch
  for (const TuneRow& row : rows) {
    ms.insert(row.tile.block_m);
    ns.insert(row.tile.block_n);
    if (row.status != RowStatus::kOk) {
      if (row.status != RowStatus::kNotRun) failed.insert({row.tile.block_m, row.tile.block_n});
      continue;
    }
    double& cell = best[{row.tile.block_m, row.tile.block_n}];
    cell = std::max(cell, row.tflops);
  }
  for (const auto& [mn, tflops] : best) failed.erase(mn);
  const auto index_of = [](const std::set<int>& values, int v) {
    return static_cast<int>(std::distance(values.begin(), values.find(v)));
  };
  const auto tics = [](const std::set<int>& values) {
    std::string text = "(";
    int i = 0;
    for (int v : values) {
      text += (i ? ", \"" : "\"") + std::to_string(v) + "\" " + std::to_string(i);
      ++i;
    }
    return text + ")";
  };
  const ForwardParams& p = setup.shape;
  std::ostringstream title;
  title << "flashrtc tune: " << to_string(p.dtype) << " d=" << p.head_dim << " mask=" << to_string(p.mask)
        << " B=" << p.batch << " H=" << p.heads_q << " Nq=" << p.seqlen_q << " Nk=" << p.seqlen_kv << " on "
        << setup.gpu_name << " (" << setup.arch << ", " << to_string(setup.space) << " space)";

  std::ostringstream s;
  s << "# Written by `flashrtc tune --plot`; draw with: gnuplot " << quoted(script_path) << "\n";
  s << "set terminal " << terminal_for(extension_of(output)) << "\n";
  s << "set output " << quoted(output) << "\n";
  s << "set title " << quoted(title.str()) << " noenhanced\n";
  s << "set xlabel 'block N (keys per pipeline stage)'\n";
  s << "set ylabel 'block M (query rows per thread block)'\n";
  s << "set cblabel 'TFLOP/s, best over warps and stages'\n";
  s << "set xtics " << tics(ns) << "\n";
  s << "set ytics " << tics(ms) << "\n";
  s << "set xrange [-0.5:" << ns.size() - 0.5 << "]\n";
  s << "set yrange [-0.5:" << ms.size() - 0.5 << "]\n";
  s << "set palette defined (0 '#440154', 1 '#3b528b', 2 '#21918c', 3 '#5ec962', 4 '#fde725')\n";
  s << "set style fill solid 1.0 noborder\n";
  s << "unset key\n";
  s << "$sweep << EOD\n# block_n_index block_m_index tflops\n";
  for (const auto& [mn, tflops] : best)
    s << index_of(ns, mn.second) << " " << index_of(ms, mn.first) << " " << tflops << "\n";
  s << "EOD\n";
  s << "$failed << EOD\n# block_n_index block_m_index\n";
  for (const auto& mn : failed) s << index_of(ns, mn.second) << " " << index_of(ms, mn.first) << "\n";
  s << "EOD\n";
  s << "plot $sweep using 1:2:(0.5):(0.5):3 with boxxyerror fillcolor palette, \\\n"
       "     $sweep using 1:2:(sprintf('%.1f', $3)) with labels textcolor 'white' font ',10'";
  if (!failed.empty())
    s << ", \\\n     $failed using 1:2:('failed') with labels textcolor 'gray40' font ',10'";
  s << "\n";
  return s.str();
}

void write_plot(const std::string& path, const TuneSetup& setup, const std::vector<TuneRow>& rows) {
  const bool script_only = extension_of(path) == ".gp";
  const std::string script_path = script_only ? path : path + ".gp";
  // The script alone still names an image to draw: the .gp file's own name with .png.
  const std::string image =
      script_only ? std::filesystem::path(path).replace_extension(".png").string() : path;
  {
    std::ofstream out(script_path, std::ios::binary | std::ios::trunc);
    out << plot_script(setup, rows, image, script_path);
    out.close();
    if (!out) throw Error(ErrorCode::kCacheIo, "--plot: cannot write " + script_path);
  }
  if (script_only) {
    std::printf("plot:      %s (draw it with `gnuplot %s`)\n", script_path.c_str(), script_path.c_str());
    return;
  }
  const auto gnuplot = find_tool("gnuplot");
  if (!gnuplot) throw MissingTool(kInstallGnuplot);
  std::error_code ignored;
  std::filesystem::remove(path, ignored);  // so that an old figure never passes for a new one
  std::fflush(stdout);
  if (run_tool(*gnuplot, {script_path}) != 0 || !std::filesystem::exists(path))
    throw MissingTool("--plot: gnuplot failed to draw " + path + " from " + script_path);
  std::printf("plot:      %s (script %s)\n", path.c_str(), script_path.c_str());
}

}  // namespace flashrtc::tools

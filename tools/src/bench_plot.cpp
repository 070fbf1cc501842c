#include "flashrtc_tools/bench_plot.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "flashrtc_tools/tool_errors.hpp"

namespace flashrtc::tools {

namespace {

constexpr const char* kLines = R"py(
fig, ax = plt.subplots(figsize=(9.6, 7.2))
for title, rows in blocks():
    if rows:
        ax.plot([r[0] for r in rows], [r[1] for r in rows], marker="o", label=title)
ax.set_xscale("log", base=2)
ax.set_xlabel("N (sequence length)")
ax.set_ylabel("TFLOP/s")
ax.set_title(TITLE, fontsize=9)
ax.grid(True, alpha=0.3)
ax.legend(fontsize=8)
fig.savefig(IMAGE)
)py";

}  // namespace

std::string bench_series(const std::string& dtype, std::int64_t head_dim, const std::string& mask,
                         const std::string& provider) {
  const std::string series = dtype + " d=" + std::to_string(head_dim) + " " + mask;
  return provider == "flashrtc" ? series : provider + ": " + series;
}

std::vector<BenchPlotPoint> read_bench_points(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--from " + path + ": cannot be read");
  std::vector<BenchPlotPoint> points;
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const nlohmann::json row = nlohmann::json::parse(line);
      if (!row.contains("tflops")) continue;
      const std::string mask = row.contains("mask") ? row.at("mask").get<std::string>()
                                                    : (row.at("causal").get<bool>() ? "causal" : "none");
      points.push_back({bench_series(row.at("dtype").get<std::string>(), row.at("d").get<std::int64_t>(),
                                     mask, row.value("provider", std::string("flashrtc"))),
                        row.at("N").get<std::int64_t>(), row.at("tflops").get<double>()});
    } catch (const nlohmann::json::exception& e) {
      throw UsageError("--from " + path + ", line " + std::to_string(number) +
                       ": not a row of `flashrtc bench --json` (" + e.what() + ")");
    }
  }
  return points;
}

Figure bench_figure(std::vector<BenchPlotPoint> points, const std::string& title) {
  if (points.empty()) throw UsageError("--plot: no measured point to draw");
  std::stable_sort(points.begin(), points.end(), [](const BenchPlotPoint& a, const BenchPlotPoint& b) {
    return std::tie(a.series, a.seqlen) < std::tie(b.series, b.seqlen);
  });
  Figure figure;
  std::ostringstream data, plot;
  std::size_t block = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (i == 0 || points[i].series != points[i - 1].series) {
      if (i) data << "\n\n";
      data << "# " << points[i].series << "\n";
      plot << (block ? ", \\\n     " : "plot ") << "@DATA@ index " << block
           << " using 1:2 with linespoints title " << gnuplot_quoted(points[i].series);
      ++block;
    }
    data << points[i].seqlen << " " << points[i].tflops << "\n";
  }
  figure.data = data.str();
  std::ostringstream s;
  s << "# Written by `flashrtc bench --plot`; draw with: gnuplot @SCRIPT@\n";
  s << "set terminal @TERMINAL@\n";
  s << "set output @IMAGE@\n";
  s << "set title " << gnuplot_quoted(title) << " noenhanced\n";
  s << "set xlabel 'N (sequence length)'\n";
  s << "set ylabel 'TFLOP/s'\n";
  s << "set logscale x 2\n";
  s << "set grid\n";
  s << "set key top left noenhanced\n";
  s << plot.str() << "\n";
  figure.gnuplot = s.str();
  figure.matplotlib = "TITLE = " + python_quoted(title) + "\n" + kLines;
  return figure;
}

}  // namespace flashrtc::tools

#include "flashrtc_tools/bench_plot.hpp"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "flashrtc/bounded_read.hpp"
#include "flashrtc_tools/format.hpp"
#include "flashrtc_tools/tool_errors.hpp"

namespace flashrtc::tools {

namespace {

// Block 0: `figure<TAB>title<TAB>number of lines`; then a block per line, opening with `N<TAB>its title`.
constexpr const char* kGnuplotLines = R"gp(stats ARG1 index 0 using (lines = column(3), 0) nooutput
set xlabel 'N (sequence length)'
set ylabel 'TFLOP/s'
set logscale x 2
set grid
set key top left noenhanced
plot for [i=1:lines] ARG1 index i using 1:2 with linespoints title columnheader(2)
)gp";

constexpr const char* kMatplotlibLines = R"py(
fig, ax = plt.subplots(figsize=(9.6, 7.2))
for rows in blocks()[1:]:
    if len(rows) > 1:
        points = [[float(v) for v in r] for r in rows[1:]]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=rows[0][1])
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
  // A link is followed here (the user named it), and what it leads to is read as any file is: only a regular
  // one, and no more than the limit, so /dev/zero or a FIFO is refused at once.
  std::error_code error;
  const std::filesystem::path target = std::filesystem::canonical(path, error);
  BoundedRead file;
  if (error) {
    file.missing = true;
    file.problem = "cannot be read (" + error.message() + ")";
  } else {
    file = read_file_bounded(target, kMaxBenchRowsBytes);
  }
  if (!file.ok())
    throw UsageError("--from " + path + ": " + file.problem + "; it must be a regular file of at most " +
                     format_bytes(double(kMaxBenchRowsBytes)) + " of `flashrtc bench --json` rows");
  std::istringstream in(file.content);
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
  std::size_t lines = 1;
  for (std::size_t i = 1; i < points.size(); ++i) lines += points[i].series != points[i - 1].series;
  std::ostringstream data;
  data << "figure\t" << plot_text(title) << "\t" << lines << "\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (i == 0 || points[i].series != points[i - 1].series)
      data << "\n\nN\t" << plot_text(points[i].series) << "\n";
    data << points[i].seqlen << "\t" << points[i].tflops << "\n";
  }
  Figure figure;
  figure.data = data.str();
  figure.gnuplot = kGnuplotLines;
  figure.matplotlib = kMatplotlibLines;
  return figure;
}

}  // namespace flashrtc::tools

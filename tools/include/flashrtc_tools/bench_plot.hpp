#pragma once
// `flashrtc bench --plot FILE`: TFLOP/s against N, one line per dtype, head dim and mask (and provider, for
// rows of bench/compare.py), drawn by render_plot; from the points just measured or from JSON lines
// written earlier (`--from`), which needs no GPU.
#include <cstdint>
#include <string>
#include <vector>

#include "flashrtc_tools/plot.hpp"

namespace flashrtc::tools {

struct BenchPlotPoint {
  std::string series;  ///< bench_series()
  std::int64_t seqlen = 0;
  double tflops = 0;
};

/// "bfloat16 d=128 causal"; a provider other than flashrtc is named first ("sdpa: bfloat16 d=128 none").
/// dtype as the JSON rows name it (torch's names).
std::string bench_series(const std::string& dtype, std::int64_t head_dim, const std::string& mask,
                         const std::string& provider = "flashrtc");

/// The most `--from` reads: a bench row is some 400 bytes, so this is some 150000 points.
inline constexpr std::uint64_t kMaxBenchRowsBytes = std::uint64_t(64) << 20;

/// The points of the measured rows of JSON lines as `flashrtc bench --json` and `bench/compare.py --json`
/// write them (dtype, d, N, tflops, and mask or causal); rows without tflops (failed points, dry runs) are
/// skipped. Throws UsageError when the file cannot be read, is not a regular file (after links), is larger
/// than kMaxBenchRowsBytes or a line is not such a row.
std::vector<BenchPlotPoint> read_bench_points(const std::string& path);

/// Lines sorted by series, points by N on a log2 axis. Throws UsageError when points is empty.
Figure bench_figure(std::vector<BenchPlotPoint> points, const std::string& title);

}  // namespace flashrtc::tools

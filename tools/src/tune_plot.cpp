#include "flashrtc_tools/tune_plot.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

namespace flashrtc::tools {

namespace {

// "[16, 32, 64]" (Python) and "("16" 0, "32" 1, "64" 2)" (gnuplot tics): the block sizes at their places.
std::string python_list(const std::set<int>& values) {
  std::string text = "[";
  for (int v : values) text += (text.size() > 1 ? ", " : "") + std::to_string(v);
  return text + "]";
}

std::string gnuplot_tics(const std::set<int>& values) {
  std::string text = "(";
  int i = 0;
  for (int v : values) {
    text += (i ? ", \"" : "\"") + std::to_string(v) + "\" " + std::to_string(i);
    ++i;
  }
  return text + ")";
}

constexpr const char* kHeatMap = R"py(
(_, cells), (_, failed) = blocks()[:2]
ns, ms = NS, MS
fig, ax = plt.subplots(figsize=(9.6, 7.2))
lo = min(c[2] for c in cells)
hi = max(c[2] for c in cells)
norm = plt.Normalize(lo, hi if hi > lo else lo + 1)
for x, y, v in cells:
    ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color=plt.cm.viridis(norm(v))))
    ax.text(x, y, "%.1f" % v, ha="center", va="center", color="white")
for x, y in failed:
    ax.text(x, y, "failed", ha="center", va="center", color="0.4")
ax.set_xticks(range(len(ns)))
ax.set_xticklabels([str(n) for n in ns])
ax.set_yticks(range(len(ms)))
ax.set_yticklabels([str(m) for m in ms])
ax.set_xlim(-0.5, len(ns) - 0.5)
ax.set_ylim(-0.5, len(ms) - 0.5)
ax.set_xlabel("block N (keys per pipeline stage)")
ax.set_ylabel("block M (query rows per thread block)")
ax.set_title(TITLE, fontsize=9)
colors = plt.cm.ScalarMappable(norm=norm, cmap="viridis")
fig.colorbar(colors, ax=ax, label="TFLOP/s, best over warps and stages")
fig.savefig(IMAGE)
)py";

}  // namespace

Figure tune_figure(const TuneSetup& setup, const std::vector<TuneRow>& rows) {
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
  const ForwardParams& p = setup.shape;
  std::ostringstream title;
  title << "flashrtc tune: " << (setup.operation != Operation::kForward ? "backward of " : "")
        << to_string(p.dtype) << " d=" << p.head_dim << " mask=" << to_string(p.mask) << " B=" << p.batch
        << " H=" << p.heads_q << " Nq=" << p.seqlen_q << " Nk=" << p.seqlen_kv << " on " << setup.gpu_name
        << " (" << setup.arch << ", " << setup.family->name << ", " << to_string(setup.space) << " space)";

  Figure figure;
  std::ostringstream data;
  data << "# TFLOP/s, best over warps and stages: block_n_index block_m_index tflops\n";
  for (const auto& [mn, tflops] : best)
    data << index_of(ns, mn.second) << " " << index_of(ms, mn.first) << " " << tflops << "\n";
  data << "\n\n# every candidate failed: block_n_index block_m_index\n";
  for (const auto& mn : failed) data << index_of(ns, mn.second) << " " << index_of(ms, mn.first) << "\n";
  figure.data = data.str();

  std::ostringstream s;
  s << "# Written by `flashrtc tune --plot`; draw with: gnuplot @SCRIPT@\n";
  s << "set terminal @TERMINAL@\n";
  s << "set output @IMAGE@\n";
  s << "set title " << gnuplot_quoted(title.str()) << " noenhanced\n";
  s << "set xlabel 'block N (keys per pipeline stage)'\n";
  s << "set ylabel 'block M (query rows per thread block)'\n";
  s << "set cblabel 'TFLOP/s, best over warps and stages'\n";
  s << "set xtics " << gnuplot_tics(ns) << "\n";
  s << "set ytics " << gnuplot_tics(ms) << "\n";
  s << "set xrange [-0.5:" << ns.size() - 0.5 << "]\n";
  s << "set yrange [-0.5:" << ms.size() - 0.5 << "]\n";
  s << "set palette defined (0 '#440154', 1 '#3b528b', 2 '#21918c', 3 '#5ec962', 4 '#fde725')\n";
  s << "set style fill solid 1.0 noborder\n";
  s << "unset key\n";
  s << "plot @DATA@ index 0 using 1:2:(0.5):(0.5):3 with boxxyerror fillcolor palette, \\\n"
       "     @DATA@ index 0 using 1:2:(sprintf('%.1f', $3)) with labels textcolor 'white' font ',10'";
  if (!failed.empty())
    s << ", \\\n     @DATA@ index 1 using 1:2:('failed') with labels textcolor 'gray40' font ',10'";
  s << "\n";
  figure.gnuplot = s.str();
  figure.matplotlib = "NS = " + python_list(ns) + "\nMS = " + python_list(ms) +
                      "\nTITLE = " + python_quoted(title.str()) + "\n" + kHeatMap;
  return figure;
}

}  // namespace flashrtc::tools

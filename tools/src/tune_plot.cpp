#include "flashrtc_tools/tune_plot.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

namespace flashrtc::tools {

namespace {

// Block 0: `figure<TAB>title<TAB>columns<TAB>rows`; block 1 the cells, `n_index<TAB>m_index<TAB>TFLOP/s` (or
// `failed` where every candidate failed); blocks 2 and 3 the block N and block M of each column and row.
constexpr const char* kGnuplotHeatMap =
    R"gp(stats ARG1 index 0 using (columns = column(3), rows = column(4), 0) nooutput
set xlabel 'block N (keys per pipeline stage)'
set ylabel 'block M (query rows per thread block)'
set cblabel 'TFLOP/s, best over warps and stages'
set xrange [-0.5:columns - 0.5]
set yrange [-0.5:rows - 0.5]
set palette defined (0 '#440154', 1 '#3b528b', 2 '#21918c', 3 '#5ec962', 4 '#fde725')
set style fill solid 1.0 noborder
unset key
plot ARG1 index 1 using 1:2:(0.5):(0.5):3 with boxxyerror fillcolor palette, \
     ARG1 index 1 using 1:2:(strcol(3) eq 'failed' ? '' : sprintf('%.1f', column(3))) with labels textcolor 'white' font ',10', \
     ARG1 index 1 using 1:2:(strcol(3) eq 'failed' ? 'failed' : '') with labels textcolor 'gray40' font ',10', \
     ARG1 index 2 using 1:(0):(''):xtic(2) with labels, \
     ARG1 index 3 using (0):1:(''):ytic(2) with labels
)gp";

constexpr const char* kMatplotlibHeatMap = R"py(
_, cells, columns, rows = blocks()[:4]
measured = [(float(x), float(y), float(v)) for x, y, v in cells if v != "failed"]
failed = [(float(x), float(y)) for x, y, v in cells if v == "failed"]
ns = [c[1] for c in columns]
ms = [r[1] for r in rows]
fig, ax = plt.subplots(figsize=(9.6, 7.2))
lo = min(c[2] for c in measured)
hi = max(c[2] for c in measured)
norm = plt.Normalize(lo, hi if hi > lo else lo + 1)
for x, y, v in measured:
    ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color=plt.cm.viridis(norm(v))))
    ax.text(x, y, "%.1f" % v, ha="center", va="center", color="white")
for x, y in failed:
    ax.text(x, y, "failed", ha="center", va="center", color="0.4")
ax.set_xticks(range(len(ns)))
ax.set_xticklabels(ns)
ax.set_yticks(range(len(ms)))
ax.set_yticklabels(ms)
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

  std::ostringstream data;
  data << "figure\t" << plot_text(title.str()) << "\t" << ns.size() << "\t" << ms.size() << "\n";
  data << "\n\n# cells: block_n_index block_m_index TFLOP/s (best over warps and stages) or failed\n";
  for (const auto& [mn, tflops] : best)
    data << index_of(ns, mn.second) << "\t" << index_of(ms, mn.first) << "\t" << tflops << "\n";
  for (const auto& mn : failed)
    data << index_of(ns, mn.second) << "\t" << index_of(ms, mn.first) << "\tfailed\n";
  data << "\n\n# columns: index block_n\n";
  for (int n : ns) data << index_of(ns, n) << "\t" << n << "\n";
  data << "\n\n# rows: index block_m\n";
  for (int m : ms) data << index_of(ms, m) << "\t" << m << "\n";
  Figure figure;
  figure.data = data.str();
  figure.gnuplot = kGnuplotHeatMap;
  figure.matplotlib = kMatplotlibHeatMap;
  return figure;
}

}  // namespace flashrtc::tools

#include "flashrtc_tools/tune_report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <tuple>

#include "flashrtc_tools/format.hpp"
#include "flashrtc_tools/json_fields.hpp"

namespace flashrtc::tools {

namespace {

std::string tile_text(const TileConfig& c) {
  return std::to_string(c.block_m) + "x" + std::to_string(c.block_n) + " w" + std::to_string(c.warps) + " s" +
         std::to_string(c.stages);
}

std::string occupancy_text(const TuneRow& row) {
  char text[48];
  std::snprintf(text, sizeof(text), "%d blk %3.0f%%", row.resident_blocks, 100.0 * row.occupancy);
  return text;
}

// What ptxas warned of: "spills", "wgmma serialized", both, or "" for neither.
std::string resource_warnings(const ResourceReport* r) {
  if (!r) return "";
  if (r->spills() && r->wgmma_serialized) return "spills, wgmma serialized";
  return r->spills() ? "spills" : r->wgmma_serialized ? "wgmma serialized" : "";
}

}  // namespace

void print_setup(const TuneSetup& s, std::size_t candidates) {
  const ForwardParams& p = s.shape;
  const bool backward = s.operation != Operation::kForward;
  const char* swept = s.operation == Operation::kBackwardDq
                          ? " (the dQ pass's tiles; the other kernels keep theirs)"
                          : " (the main kernel's tiles; the other kernels keep theirs)";
  std::printf(
      "tune:      %s%s d=%lld mask=%s B=%lld H=%lld Nq=%lld Nk=%lld (%.3g FLOP per call%s), %s kernels%s\n",
      backward ? "backward of " : "", std::string(to_string(p.dtype)).c_str(),
      static_cast<long long>(p.head_dim), std::string(to_string(p.mask)).c_str(),
      static_cast<long long>(p.batch), static_cast<long long>(p.heads_q), static_cast<long long>(p.seqlen_q),
      static_cast<long long>(p.seqlen_kv), s.flops, backward ? ", 2.5x the forward's" : "",
      s.family->name.c_str(), backward ? swept : "");
  std::printf("space:     %s: %zu of the %zu configurations that fit\n", to_string(s.space), candidates,
              s.family_configs);
  std::printf(
      "device:    %s (%s; %s shared memory per block, %s per SM, %d registers and %d threads per SM)\n",
      s.gpu_name.empty() ? "no GPU" : s.gpu_name.c_str(), s.arch.c_str(),
      format_bytes(double(s.limits.smem_per_block_bytes)).c_str(),
      format_bytes(double(s.limits.smem_per_sm_bytes)).c_str(), s.limits.registers_per_sm,
      s.limits.max_threads_per_sm);
  std::printf("database:  %s\n", tuning_db_path().string().c_str());
  if (s.key) std::printf("key:       %s\n", to_string(*s.key).c_str());
}

void print_candidates(const TuneSetup& s, const std::vector<TuneRow>& rows) {
  const bool compiled = std::any_of(rows.begin(), rows.end(), [](const TuneRow& r) { return r.kernel; });
  if (!compiled) {
    std::printf("%-16s %7s %10s %14s\n", "config", "threads", "smem", "blocks/SM max");
    for (const TuneRow& row : rows) {
      const int blocks = resident_blocks_per_sm(s.limits, row.threads, 0, row.smem_bytes);
      std::printf("%-16s %7d %10s %14d\n", tile_text(row.tile).c_str(), row.threads,
                  format_bytes(double(row.smem_bytes)).c_str(), blocks);
    }
    return;
  }
  // Compiled: the registers ptxas allocated bound the blocks per SM too.
  constexpr const char* kFormat = "%-16s %7s %10s %5s %11s %12s  %s\n";
  std::printf(kFormat, "config", "threads", "smem", "regs", "spill st/ld", "occupancy", "status");
  for (const TuneRow& row : rows) {
    const ResourceReport* r = row.kernel ? &row.kernel->resources : nullptr;
    const auto n = [](auto v) { return std::to_string(v); };
    const std::string warnings = resource_warnings(r);
    const std::string status = row.status == RowStatus::kCompileFailed || row.status == RowStatus::kDoesNotFit
                                   ? std::string(to_string(row.status)) + ": " + row.message
                               : warnings.empty() ? "compiled"
                                                  : warnings;
    std::printf(kFormat, tile_text(row.tile).c_str(), n(row.threads).c_str(),
                format_bytes(double(row.smem_bytes)).c_str(), r ? n(r->registers).c_str() : "-",
                r ? (n(r->spill_store_bytes) + "/" + n(r->spill_load_bytes)).c_str() : "-",
                r ? occupancy_text(row).c_str() : "-", status.c_str());
  }
}

void sort_rows(std::vector<TuneRow>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const TuneRow& a, const TuneRow& b) {
    const bool a_ok = a.status == RowStatus::kOk, b_ok = b.status == RowStatus::kOk;
    if (a_ok != b_ok) return a_ok;
    return a_ok && a.median_ms < b.median_ms;
  });
}

void print_table(const std::vector<TuneRow>& rows, std::size_t top) {
  constexpr const char* kFormat = "%4s  %-16s %10s %8s %5s %11s %10s %12s  %s\n";
  std::printf(kFormat, "rank", "config", "median ms", "TFLOP/s", "regs", "spill st/ld", "smem", "occupancy",
              "status");
  std::size_t rank = 0, hidden = 0;
  for (const TuneRow& row : rows) {
    const bool ok = row.status == RowStatus::kOk;
    if (ok && ++rank > top) {
      ++hidden;
      continue;
    }
    const auto n = [](auto v) { return std::to_string(v); };
    const ResourceReport* r = row.kernel ? &row.kernel->resources : nullptr;
    char ms[32] = "-", tflops[32] = "-";
    if (ok) {
      std::snprintf(ms, sizeof(ms), "%.4f", row.median_ms);
      std::snprintf(tflops, sizeof(tflops), "%.2f", row.tflops);
    }
    const std::string warnings = resource_warnings(r);
    const std::string status = !ok                ? std::string(to_string(row.status)) + ": " + row.message
                               : warnings.empty() ? "ok"
                                                  : "ok, " + warnings;
    std::printf(kFormat, ok ? n(rank).c_str() : "-", tile_text(row.tile).c_str(), ms, tflops,
                r ? n(r->registers).c_str() : "-",
                r ? (n(r->spill_store_bytes) + "/" + n(r->spill_load_bytes)).c_str() : "-",
                format_bytes(double(row.smem_bytes)).c_str(), r ? occupancy_text(row).c_str() : "-",
                status.c_str());
  }
  if (hidden) std::printf("(%zu slower rows not shown: --top to see more, --output FILE for all)\n", hidden);
}

void write_json(const std::string& path, const TuneSetup& s, const std::vector<TuneRow>& rows,
                const std::optional<TileConfig>& winner, bool written) {
  using nlohmann::json;
  json items = json::array();
  std::size_t rank = 0;
  for (const TuneRow& row : rows) {
    json j = row.tile;
    j["status"] = to_string(row.status);
    j["message"] = row.message;
    j["rank"] = row.status == RowStatus::kOk ? json(++rank) : json(nullptr);
    j["threads"] = row.threads;
    j["smem_bytes"] = row.smem_bytes;
    if (row.status == RowStatus::kOk) {
      j["median_ms"] = row.median_ms;
      j["min_ms"] = row.min_ms;
      j["max_ms"] = row.max_ms;
      j["tflops"] = row.tflops;
    }
    if (row.kernel) {
      j.update(json(*row.kernel));
      j["blocks_per_sm"] = row.resident_blocks;
      j["occupancy"] = row.occupancy;
    }
    items.push_back(std::move(j));
  }
  const ForwardParams& p = s.shape;
  const json root = {{"gpu", s.gpu_name},
                     {"arch", s.arch},
                     {"nvrtc", nvrtc_version()},
                     {"op", s.operation == Operation::kForward ? "fwd" : "bwd"},
                     {"kernel", to_string(s.operation)},
                     {"family", s.family->name},
                     {"dtype", std::string(to_string(p.dtype))},
                     {"head_dim", p.head_dim},
                     {"mask", std::string(to_string(p.mask))},
                     {"batch", p.batch},
                     {"heads", p.heads_q},
                     {"seqlen_q", p.seqlen_q},
                     {"seqlen_kv", p.seqlen_kv},
                     {"flops", s.flops},
                     {"space", to_string(s.space)},
                     {"tuning_key", s.key ? json(to_string(*s.key)) : json(nullptr)},
                     {"tuning_db", tuning_db_path().string()},
                     {"winner", winner ? json(*winner) : json(nullptr)},
                     {"written_to_db", written},
                     {"rows", std::move(items)}};
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << json_text(root, 2) << "\n";
  out.close();
  if (!out) throw Error(ErrorCode::kCacheIo, "--output: cannot write " + path);
}

}  // namespace flashrtc::tools

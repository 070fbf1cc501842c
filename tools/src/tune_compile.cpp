#include "flashrtc_tools/tune_compile.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "flashrtc_tools/progress.hpp"

namespace flashrtc::tools {

const char* to_string(RowStatus status) {
  switch (status) {
    case RowStatus::kPending:
      return "pending";
    case RowStatus::kOk:
      return "ok";
    case RowStatus::kCompileFailed:
      return "compile failed";
    case RowStatus::kDoesNotFit:
      return "does not fit";
    case RowStatus::kWrong:
      return "wrong results";
    case RowStatus::kLaunchFailed:
      return "launch failed";
    case RowStatus::kNotRun:
      return "not run";
  }
  return "unknown";
}

namespace {

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// Registers are known only now: with them a tile may leave no block room on an SM.
void check_fit(const SmLimits& limits, TuneRow& row) {
  const ResourceReport& r = row.kernel->resources;
  const std::size_t smem = row.smem_bytes + static_cast<std::size_t>(r.static_smem_bytes);
  row.resident_blocks = resident_blocks_per_sm(limits, row.threads, r.registers, smem);
  row.occupancy = occupancy(limits, row.threads, row.resident_blocks);
  if (row.resident_blocks > 0) return;
  row.status = RowStatus::kDoesNotFit;
  row.message = "no block fits an SM: " + std::to_string(r.registers) + " registers x " +
                std::to_string(row.threads) + " threads, " + std::to_string(smem) + " bytes of shared memory";
}

}  // namespace

KernelSpec candidate_spec(const TuneSetup& setup, const TileConfig& tile) {
  ConfigQuery query;
  query.operation = setup.operation;
  query.dtype = setup.shape.dtype;
  query.head_dim = static_cast<int>(setup.shape.head_dim);
  query.mask = setup.shape.mask;
  query.seqlen_q = setup.shape.seqlen_q;
  query.seqlen_kv = setup.shape.seqlen_kv;
  ConfigResolution resolution;
  resolution.family = setup.family;
  resolution.config = tile;
  return call_kernel_spec(query, resolution);
}

std::vector<TuneRow> candidate_rows(const TuneSetup& setup, const std::vector<TileConfig>& tiles) {
  std::vector<TuneRow> rows;
  for (const TileConfig& tile : tiles) {
    const KernelSpec spec = candidate_spec(setup, tile);
    TuneRow row;
    row.tile = tile;
    row.threads = setup.family->threads(spec);
    row.smem_bytes = setup.family->smem_bytes(spec);
    rows.push_back(std::move(row));
  }
  return rows;
}

void compile_candidates(const TuneSetup& setup, std::vector<TuneRow>& rows, unsigned jobs) {
  Progress progress("compile", rows.size());
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < rows.size(); i = next++) {
      TuneRow& row = rows[i];
      // A forward tile compiles on the best family that builds it (as a call with that tile would run: the
      // base tile may be another family's); another operation's tiles are its swept family's.
      // The grid stays the swept family's choice for the call (a tile of another family ignores it).
      KernelSpec spec = candidate_spec(setup, row.tile);
      if (setup.operation == Operation::kForward) spec.family = nullptr;
      std::string line = to_string(row.tile) + ": ";
      try {
        row.kernel = compile_kernel(spec, setup.arch);
        check_fit(setup.limits, row);
        const ResourceReport& r = row.kernel->resources;
        char text[160];
        std::snprintf(text, sizeof(text), "%d registers, spill %d/%d bytes%s, %.0f ms (%s)", r.registers,
                      r.spill_store_bytes, r.spill_load_bytes, r.wgmma_serialized ? ", wgmma serialized" : "",
                      row.kernel->compile_ms, to_string(row.kernel->source));
        line += row.status == RowStatus::kDoesNotFit ? row.message : text;
      } catch (const Error& e) {
        row.status = RowStatus::kCompileFailed;
        row.message = std::string(to_string(e.code())) + ": " + first_line(e.message());
        line += "FAILED (" + row.message + ")";
      } catch (const std::exception& e) {
        row.status = RowStatus::kCompileFailed;
        row.message = first_line(e.what());
        line += "FAILED (" + row.message + ")";
      }
      progress.step(line);
    }
  };
  std::vector<std::thread> workers;
  for (unsigned j = 1; j < std::min<std::size_t>(std::max(jobs, 1u), rows.size()); ++j)
    workers.emplace_back(work);
  work();
  for (std::thread& worker : workers) worker.join();
}

}  // namespace flashrtc::tools

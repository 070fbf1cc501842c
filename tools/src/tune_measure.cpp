#include "flashrtc_tools/tune_measure.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "flashrtc_tools/format.hpp"
#include "flashrtc_tools/progress.hpp"
#include "flashrtc_tools/tune_candidate_bench.hpp"

namespace flashrtc::tools {

namespace {

bool context_usable() {
  try {
    device_synchronize();
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string trimmed(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace

bool measure_candidates(const TuneSetup& setup, const DeviceInfo& device, int warmup, int repeats,
                        std::uint64_t seed, std::vector<TuneRow>& rows) {
  std::size_t runnable = 0;
  for (const TuneRow& row : rows) runnable += row.status == RowStatus::kPending ? 1 : 0;
  if (runnable == 0) return true;
  const std::unique_ptr<CandidateBench> bench = make_candidate_bench(setup, device, seed);
  const ForwardParams& problem = bench->check_shape();
  std::printf(
      "measure:   each candidate checked first (B=1 H=2 Nq=%lld Nk=%lld, fresh random inputs, %s against the "
      "Eigen reference), then %d warm-up and %d timed launches (median), rotating %zu buffer sets of %s "
      "(L2 %s)\n",
      static_cast<long long>(problem.seqlen_q), static_cast<long long>(problem.seqlen_kv),
      bench->checked_outputs(), warmup, repeats, bench->buffer_sets(),
      format_bytes(double(bench->buffer_bytes())).c_str(),
      format_bytes(double(device.l2_cache_bytes)).c_str());
  Stream stream;
  Progress progress("measure", runnable);
  std::string lost_at;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    TuneRow& row = rows[i];
    if (row.status != RowStatus::kPending) continue;
    if (!lost_at.empty()) {
      row.status = RowStatus::kNotRun;
      row.message = "the CUDA context was lost at " + lost_at;
      continue;
    }
    const std::string name = to_string(row.tile);
    try {
      const CheckOutcome check = bench->check(row.tile, seed + 1 + i, stream.handle());
      if (!check.pass) {
        row.status = RowStatus::kWrong;
        row.message =
            std::string(bench->checked_outputs()) + ": outside the tolerance against the Eigen reference";
        progress.note("check of " + name + " FAILED:\n" + trimmed(check.report));
        progress.step(name + ": wrong results");
        continue;
      }
      const Timing t = bench->time(row.tile, warmup, repeats, stream.handle());
      row.status = RowStatus::kOk;
      row.median_ms = t.median_ms;
      row.min_ms = t.min_ms;
      row.max_ms = t.max_ms;
      row.tflops = setup.flops / (t.median_ms * 1e-3) / 1e12;
      char text[96];
      std::snprintf(text, sizeof(text), ": %.4f ms, %.2f TFLOP/s", row.median_ms, row.tflops);
      progress.step(name + text);
    } catch (const Error& e) {
      row.status = RowStatus::kLaunchFailed;
      row.message = e.message();
      progress.step(name + ": launch failed (" + e.message() + ")");
      if (!context_usable()) lost_at = name;
    }
  }
  return lost_at.empty();
}

}  // namespace flashrtc::tools

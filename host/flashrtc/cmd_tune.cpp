// `flashrtc tune`: sweep the tile configurations of a call's kernel family on the GPU in hand - compile
// them in parallel, check each against the Eigen reference, time the ones that pass - and write the
// fastest into the tuning database, which every later process uses with no rebuild.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_support.hpp"
#include "progress.hpp"
#include "tune_bench.hpp"
#include "tune_compile.hpp"
#include "tune_plot.hpp"
#include "tune_report.hpp"
#include "tune_types.hpp"

namespace flashrtc::cli {

namespace {

struct TuneOptions {
  std::string dtype, mask = "none", space = "quick", arch, json_path, plot_path;
  int head_dim = 0;
  std::int64_t seqlen = 0, batch = 2, heads = 16;
  std::optional<std::int64_t> kv_seqlen;
  std::size_t top = 10;
  int warmup = 3, repeats = 15;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  std::uint64_t seed = 1;
  bool dry_run = false;
};

// Validation needs pointers that look like device pointers; never dereferenced (as in `flashrtc run`).
alignas(16) const unsigned char kPlaceholder[16] = {};

ForwardParams shape_of(const TuneOptions& o) {
  ForwardParams p;
  p.dtype = dtype_from(o.dtype);
  p.mask = mask_from(o.mask);
  p.batch = o.batch;
  p.heads_q = p.heads_kv = o.heads;
  p.seqlen_q = o.seqlen;
  p.seqlen_kv = o.kv_seqlen.value_or(o.seqlen);
  p.head_dim = o.head_dim;
  p.q = p.o = TensorRef::bnhd(kPlaceholder, p.seqlen_q, p.heads_q, p.head_dim);
  p.k = p.v = TensorRef::bnhd(kPlaceholder, p.seqlen_kv, p.heads_kv, p.head_dim);
  return p;
}

// The device the sweep is for: the GPU in hand, or for --dry-run an arch's published limits.
TuneSetup setup_for(const TuneOptions& o, const ForwardParams& shape, std::optional<DeviceInfo>& device) {
  TuneSetup s;
  s.shape = shape;
  s.space = *parse_tune_space(o.space);
  s.flops = attention_flops(shape);
  const std::string& arch_override = runtime_config().arch_override;
  if (device_available()) device = current_device();
  const std::string device_arch = device ? (arch_override.empty() ? device->arch : arch_override) : "";
  if (device && (o.arch.empty() || o.arch == device_arch)) {
    s.gpu_name = device->name;
    s.arch = device_arch;
    s.limits = sm_limits(*device);
  } else if (!o.dry_run) {
    if (device)
      throw UsageError("--arch " + o.arch + ": the sweep runs on this GPU (" + device_arch +
                       "); --arch only chooses the limits of --dry-run");
    throw Error(ErrorCode::kNoDevice, "no GPU: " + device_unavailable_reason() +
                                          " (`flashrtc tune --dry-run --arch sm_90a` lists the candidates without one)");
  } else {
    device.reset();
    s.arch = !o.arch.empty() ? o.arch : !arch_override.empty() ? arch_override : "sm_80";
    s.limits = assumed_sm_limits(s.arch);
    std::printf("note:      no GPU used: the published limits of %s%s\n", s.arch.c_str(),
                o.arch.empty() && arch_override.empty() ? " (assumed; --arch picks another)" : "");
  }
  s.family = select_kernel_family(Operation::kForward, shape.dtype, static_cast<int>(shape.head_dim), s.arch).family;
  if (!s.gpu_name.empty())
    s.key = make_tuning_key(s.gpu_name, s.arch, shape.dtype, static_cast<int>(shape.head_dim), shape.mask,
                            shape.seqlen_q, shape.seqlen_kv, s.family->name);
  return s;
}

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

// Checks, then times, every compiled row; returns false when a failure lost the CUDA context (the rows
// after it are kNotRun).
bool measure(const TuneOptions& o, const TuneSetup& setup, const DeviceInfo& device, std::vector<TuneRow>& rows) {
  std::size_t runnable = 0;
  for (const TuneRow& row : rows) runnable += row.status == RowStatus::kPending ? 1 : 0;
  if (runnable == 0) return true;
  const TimingBuffers buffers(setup.shape, device.l2_cache_bytes, device.global_memory_bytes, o.seed);
  const ForwardParams problem = check_problem(setup.shape);
  std::printf(
      "measure:   each candidate checked first (B=1 H=2 Nq=%lld Nk=%lld, fresh random inputs, against the Eigen "
      "reference), then %d warm-up and %d timed launches (median), rotating %zu buffer sets of %s (L2 %s)\n",
      static_cast<long long>(problem.seqlen_q), static_cast<long long>(problem.seqlen_kv), o.warmup, o.repeats,
      buffers.sets(), format_bytes(double(buffers.total_bytes())).c_str(),
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
      const CheckOutcome check = check_candidate(problem, row.tile, o.seed + 1 + i, stream.handle());
      if (!check.pass) {
        row.status = RowStatus::kWrong;
        row.message = "o or lse outside the tolerance against the Eigen reference";
        progress.note("check of " + name + " FAILED:\n" + trimmed(check.report));
        progress.step(name + ": wrong results");
        continue;
      }
      const Timing t = time_candidate(setup.shape, row.tile, buffers, o.warmup, o.repeats, stream.handle());
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

void report_winner(const TuneOptions& o, const TuneSetup& setup, const std::vector<TuneRow>& rows) {
  const TuneRow& best = rows.front();
  std::printf("winner:    %s: %.4f ms, %.2f TFLOP/s\n", to_string(best.tile).c_str(), best.median_ms, best.tflops);
  const TileConfig fallback =
      default_forward_config(setup.shape.dtype, static_cast<int>(setup.shape.head_dim), setup.limits.smem_per_block_bytes,
                             setup.shape.seqlen_kv);
  for (const TuneRow& row : rows)
    if (row.tile == fallback && row.status == RowStatus::kOk)
      std::printf("default:   %s: %.4f ms, %.2f TFLOP/s (the winner is %.2fx faster)\n", to_string(fallback).c_str(),
                  row.median_ms, row.tflops, row.median_ms / best.median_ms);
  std::string command = "flashrtc config --dtype " + o.dtype + " --head-dim " + std::to_string(o.head_dim) +
                        " --seqlen " + std::to_string(o.seqlen);
  if (o.kv_seqlen) command += " --kv-seqlen " + std::to_string(*o.kv_seqlen);
  if (o.mask != "none") command += " --mask " + o.mask;
  std::printf("written:   %s; later processes on this GPU use it for %s (see `%s`)\n",
              tuning_db_path().string().c_str(), to_string(*setup.key).c_str(), command.c_str());
}

int execute_tune(const TuneOptions& o) {
  const ForwardParams shape = shape_of(o);
  validate_forward(shape);  // a bad shape is a usage error before any device work
  if (!o.plot_path.empty()) {
    if (o.dry_run) throw UsageError("--plot draws measurements, and --dry-run makes none");
    check_plot_target(o.plot_path);  // before the sweep, not after it
  }
  std::optional<DeviceInfo> device;
  const TuneSetup setup = setup_for(o, shape, device);
  const int head_dim = static_cast<int>(shape.head_dim);
  const auto candidates =
      tuning_candidates(*setup.family, shape.dtype, head_dim, shape.seqlen_q, shape.seqlen_kv, setup.space, setup.limits);
  TuneSetup described = setup;
  described.family_configs =
      tuning_candidates(*setup.family, shape.dtype, head_dim, shape.seqlen_q, shape.seqlen_kv, TuneSpace::kFull,
                        setup.limits)
          .size();
  print_setup(described, candidates.size());
  if (candidates.empty())
    throw Error(ErrorCode::kUnsupported, "no configuration of the " +
                                             setup.family->name +
                                             " kernels fits " + setup.arch + " at d=" + std::to_string(head_dim));
  std::vector<TuneRow> rows;
  for (const TileConfig& tile : candidates) {
    TuneRow row;
    row.tile = tile;
    row.threads = tile.warps * 32;
    row.smem_bytes = forward_smem_bytes(shape.dtype, head_dim, tile);
    rows.push_back(std::move(row));
  }

  if (o.dry_run) {
    for (TuneRow& row : rows) {
      row.status = RowStatus::kNotRun;
      row.message = "dry run";
    }
    print_candidates(described, rows);
    if (!o.json_path.empty()) write_json(o.json_path, described, rows, std::nullopt, false);
    std::printf("dry run: nothing compiled, timed or written to the database\n");
    return kExitOk;
  }
  if (!runtime_config().config_override.empty())
    std::printf("note:      FLASHRTC_CONFIG='%s' is set: it overrides tuned entries in calls that see it\n",
                runtime_config().config_override.c_str());

  compile_candidates(setup, rows, o.jobs);
  const bool complete = measure(o, setup, *device, rows);
  sort_rows(rows);
  print_table(rows, o.top);

  std::optional<TileConfig> winner;
  bool written = false;
  if (rows.front().status == RowStatus::kOk) winner = rows.front().tile;
  if (winner && complete) {
    const TuneRow& best = rows.front();
    TuningEntry entry;
    entry.key = *setup.key;
    entry.config = best.tile;
    entry.median_ms = best.median_ms;
    entry.tflops = best.tflops;
    entry.batch = shape.batch;
    entry.heads = shape.heads_q;
    entry.seqlen_q = shape.seqlen_q;
    entry.seqlen_kv = shape.seqlen_kv;
    entry.space = to_string(setup.space);
    entry.tuned_unix = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
    record_tuning_entry(entry);
    written = true;
    report_winner(o, setup, rows);
  } else if (winner) {
    std::printf("the sweep stopped when the CUDA context was lost; the database is unchanged\n");
  } else {
    std::printf("no candidate passed its check and timing; the database is unchanged\n");
  }
  if (!o.json_path.empty()) {
    write_json(o.json_path, described, rows, winner, written);
    std::printf("json:      %s (%zu rows)\n", o.json_path.c_str(), rows.size());
  }
  if (!o.plot_path.empty()) {
    if (winner)
      write_plot(o.plot_path, described, rows);
    else
      std::printf("plot:      skipped, nothing was measured\n");
  }
  if (!complete) return kExitDevice;
  return written ? kExitOk : kExitCheckFailed;
}

CLI::Validator space_validator() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        return parse_tune_space(name) ? std::string() : "unknown space '" + name + "' (quick, full)";
      },
      "quick|full");
}

}  // namespace

Command add_tune_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "tune", "sweep tile configurations on this GPU, check and time each, write the fastest to the tuning database");
  auto o = std::make_shared<TuneOptions>();
  app->add_option("--dtype", o->dtype, "element type")->required()->check(dtype_validator());
  app->add_option("--head-dim", o->head_dim, "head dimension")->required()->check(head_dim_validator());
  app->add_option("--seqlen", o->seqlen, "query sequence length")->required();
  app->add_option("--kv-seqlen", o->kv_seqlen, "key/value sequence length (default: --seqlen)");
  app->add_option("--batch", o->batch, "batch size of the timed call")->capture_default_str();
  app->add_option("--heads", o->heads, "heads of the timed call")->capture_default_str();
  app->add_option("--mask", o->mask, "mask")->capture_default_str()->check(mask_validator());
  app->add_option("--space", o->space, "quick: the larger tiles and the default; full: every one that fits")
      ->capture_default_str()
      ->check(space_validator());
  app->add_option("--top", o->top, "rows of the table (failures are always shown)")->capture_default_str();
  app->add_flag("--dry-run", o->dry_run, "list the candidates and stop (no GPU needed)");
  app->add_option("--arch", o->arch, "with --dry-run: the arch whose limits to list for (default: the GPU's)");
  app->add_option("--json", o->json_path, "write every row to this JSON file");
  app->add_option("--plot", o->plot_path, "draw TFLOP/s over block M x block N to FILE.png/.svg/.pdf with gnuplot "
                                          "(FILE.gp: the script alone)");
  app->add_option("--jobs,-j", o->jobs, "parallel compiles (default: the number of cores)")->check(CLI::Range(1u, 1024u));
  app->add_option("--warmup", o->warmup, "untimed launches per candidate")->capture_default_str()->check(CLI::Range(0, 1000));
  app->add_option("--repeats", o->repeats, "timed launches per candidate (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  app->add_option("--seed", o->seed, "random seed of the inputs")->capture_default_str();
  return {app, [o] { return execute_tune(*o); }};
}

}  // namespace flashrtc::cli

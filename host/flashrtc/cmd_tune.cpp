// `flashrtc tune`: sweep the tile configurations of a call's kernel family (--op bwd: the backward's main
// kernel) on the GPU in hand - compile them in parallel, check each against the Eigen reference, time the
// ones that pass - and write the fastest into the tuning database, which every later process uses with no
// rebuild.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_support.hpp"
#include "flashrtc_tools/backward_bench.hpp"
#include "flashrtc_tools/host_tensors.hpp"
#include "flashrtc_tools/tune_compile.hpp"
#include "flashrtc_tools/tune_measure.hpp"
#include "flashrtc_tools/tune_plot.hpp"
#include "flashrtc_tools/tune_report.hpp"
#include "flashrtc_tools/tune_types.hpp"

namespace flashrtc::cli {

using namespace flashrtc::tools;

namespace {

struct TuneOptions {
  std::string op = "fwd", kernel = "main", dtype, mask = "none", space = "quick", output_path, plot_path;
  int head_dim = 0;
  std::int64_t seqlen = 0, batch = 2, heads = 16;
  std::optional<std::int64_t> kv_seqlen;
  std::size_t top = 10;
  int warmup = 3, iters = 15;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  std::uint64_t seed = 1;
  bool dry_run = false, compile = false, deterministic = false;
  TileOptions tile;
  TargetOptions target;
};

ForwardParams shape_of(const TuneOptions& o) {
  ForwardParams p;
  p.dtype = dtype_from(o.dtype);
  p.mask = mask_from(o.mask);
  p.batch = o.batch;
  p.heads_q = p.heads_kv = o.heads;
  p.seqlen_q = o.seqlen;
  p.seqlen_kv = o.kv_seqlen.value_or(o.seqlen);
  p.head_dim = o.head_dim;
  p.q = p.o = make_tensor_ref(kDefaultLayout, kValidationPlaceholder, p.seqlen_q, p.heads_q, p.head_dim);
  p.k = p.v = make_tensor_ref(kDefaultLayout, kValidationPlaceholder, p.seqlen_kv, p.heads_kv, p.head_dim);
  return p;
}

// The kernel whose tiles are swept on arch: the forward's; or the backward's main kernel as
// backward_operations picks it (the fused kernel unless --deterministic, where a fused family serves the
// call), or with --kernel dq the deterministic mode's dQ pass.
Operation operation_of(const TuneOptions& o, const ForwardParams& shape, const std::string& arch) {
  if (o.op != "bwd") return Operation::kForward;
  BackwardParams call = backward_of(shape);
  call.deterministic = o.deterministic;
  const std::array<Operation, 3> ops =
      backward_operations(call, arch, config_query(call, Operation::kBackward).traits);
  if (o.kernel == "main") return ops[1];
  if (ops[2] != Operation::kBackwardDq)
    throw UsageError("--kernel dq: the backward on " + arch +
                     " adds dQ in its fused kernel and runs no dQ pass " +
                     "unless deterministic; add --deterministic to tune that mode's dQ pass");
  return ops[2];
}

// The query whose tile is tuned: the forward call's, or that of one kernel of its backward.
ConfigQuery tuned_query(const TuneSetup& setup) {
  return setup.operation == Operation::kForward ? config_query(setup.shape)
                                                : config_query(backward_of(setup.shape), setup.operation);
}

// The device the sweep is for: the GPU in hand, or for --dry-run the one --arch/--gpu-name name (published
// limits), as every command resolves it (TargetOptions).
TuneSetup setup_for(const TuneOptions& o, const ForwardParams& shape, std::optional<DeviceInfo>& device,
                    DeviceTarget& target) {
  TuneSetup s;
  s.shape = shape;
  s.space = *parse_tune_space(o.space);
  s.flops = o.op != "bwd" ? attention_flops(shape) : attention_backward_flops(backward_of(shape));
  if (device_available()) device = current_device();
  target = o.target.target();
  const std::optional<DeviceTarget> in_hand = device ? current_device_target() : std::nullopt;
  if (!o.dry_run) {
    if (!in_hand)
      throw Error(ErrorCode::kNoDevice,
                  "no GPU: " + device_unavailable_reason() +
                      " (`flashrtc tune --dry-run --arch sm_90a` lists the candidates without one)");
    o.target.require_device(in_hand->gpu_name, in_hand->arch);
    target = *in_hand;
  }
  if (in_hand && target.gpu_name == in_hand->gpu_name && target.arch == in_hand->arch) {
    s.limits = sm_limits(*device);
  } else {
    device.reset();
    if (target.arch.empty()) target.arch = "sm_80";
    s.limits = assumed_sm_limits(target.arch);
    std::printf("note:      no GPU used: the published limits of %s%s\n", target.arch.c_str(),
                o.target.arch.empty() && runtime_config().arch_override.empty()
                    ? " (assumed; --arch picks another)"
                    : "");
  }
  s.gpu_name = target.gpu_name;
  s.arch = target.arch;
  s.operation = operation_of(o, shape, s.arch);
  s.family = select_kernel_family(s.operation, shape.dtype, static_cast<int>(shape.head_dim), s.arch,
                                  tuned_query(s).traits)
                 .family;
  if (!s.gpu_name.empty())
    s.key = make_tuning_key(s.gpu_name, s.arch, shape.dtype, static_cast<int>(shape.head_dim), shape.mask,
                            shape.seqlen_q, shape.seqlen_kv, s.family->name);
  return s;
}

void report_winner(const TuneOptions& o, const TuneSetup& setup, const ConfigResolution& baseline,
                   const std::vector<TuneRow>& rows) {
  const TuneRow& best = rows.front();
  std::printf("winner:    %s: %.4f ms, %.2f TFLOP/s\n", to_string(best.tile).c_str(), best.median_ms,
              best.tflops);
  for (const TuneRow& row : rows)
    if (row.tile == baseline.config && row.status == RowStatus::kOk)
      std::printf("base:      %s: %.4f ms, %.2f TFLOP/s (the winner is %.2fx faster)\n",
                  to_string(baseline.config).c_str(), row.median_ms, row.tflops,
                  row.median_ms / best.median_ms);
  std::string command = std::string("flashrtc config ") + (o.op == "bwd" ? "--op bwd " : "") +
                        (o.deterministic ? "--deterministic " : "") + "--dtype " + o.dtype + " --head-dim " +
                        std::to_string(o.head_dim) + " --seqlen " + std::to_string(o.seqlen);
  if (o.kv_seqlen) command += " --kv-seqlen " + std::to_string(*o.kv_seqlen);
  if (o.mask != "none") command += " --mask " + o.mask;
  std::printf("written:   %s; later processes on this GPU use it for %s (see `%s`)\n",
              tuning_db_path().string().c_str(), to_string(*setup.key).c_str(), command.c_str());
}

int execute_tune(const TuneOptions& o) {
  const ForwardParams shape = shape_of(o);
  validate_forward(shape);  // a bad shape is a usage error before any device work
  if (o.op != "bwd" && o.kernel != "main") throw UsageError("--kernel dq goes with --op bwd");
  if (o.op != "bwd" && o.deterministic) throw UsageError("--deterministic goes with --op bwd");
  if (o.op == "bwd") {
    BackwardParams backward = backward_of(shape);
    backward.lse = reinterpret_cast<const float*>(kValidationPlaceholder);
    validate_backward(backward);
  }
  if (o.compile && !o.dry_run) throw UsageError("--compile goes with --dry-run (a sweep always compiles)");
  if (!o.plot_path.empty()) {
    if (o.dry_run) throw UsageError("--plot draws measurements, and --dry-run makes none");
    check_plot_target(o.plot_path);  // before the sweep, not after it
  }
  std::optional<DeviceInfo> device;
  DeviceTarget target;
  const TuneSetup setup = setup_for(o, shape, device, target);
  // The tile calls use now (with --block-m etc. applied) is always swept: the winner is compared with it.
  const ConfigResolution baseline = o.tile.resolve(tuned_query(setup), target);
  const int head_dim = static_cast<int>(shape.head_dim);
  auto candidates = tuning_candidates(*setup.family, shape.dtype, head_dim, shape.seqlen_q, shape.seqlen_kv,
                                      setup.space, setup.limits, setup.arch);
  if (std::find(candidates.begin(), candidates.end(), baseline.config) == candidates.end())
    candidates.push_back(baseline.config);
  TuneSetup described = setup;
  described.family_configs = tuning_candidates(*setup.family, shape.dtype, head_dim, shape.seqlen_q,
                                               shape.seqlen_kv, TuneSpace::kFull, setup.limits, setup.arch)
                                 .size();
  print_setup(described, candidates.size());
  std::printf("base:      %s (%s: %s)\n", to_string(baseline.config).c_str(), to_string(baseline.source),
              baseline.why.c_str());
  if (candidates.empty())
    throw Error(ErrorCode::kUnsupported, "no configuration of the " + setup.family->name + " kernels fits " +
                                             setup.arch + " at d=" + std::to_string(head_dim));
  std::vector<TuneRow> rows = candidate_rows(setup, candidates);

  if (o.dry_run) {
    // NVRTC needs no GPU: --compile adds what ptxas allocated to the listing.
    if (o.compile) compile_candidates(setup, rows, o.jobs);
    for (TuneRow& row : rows) {
      if (row.status != RowStatus::kPending) continue;
      row.status = RowStatus::kNotRun;
      row.message = "dry run";
    }
    print_candidates(described, rows);
    if (!o.output_path.empty()) write_json(o.output_path, described, rows, std::nullopt, false);
    std::printf("dry run: nothing %stimed or written to the database\n", o.compile ? "" : "compiled, ");
    return kExitOk;
  }
  if (setup.operation == Operation::kForward && !runtime_config().config_override.empty())
    std::printf("note:      FLASHRTC_CONFIG='%s' is set: it overrides tuned entries in calls that see it\n",
                runtime_config().config_override.c_str());

  compile_candidates(setup, rows, o.jobs);
  const bool complete = measure_candidates(setup, *device, o.warmup, o.iters, o.seed, rows);
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
    entry.tuned_unix =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    record_tuning_entry(entry);
    written = true;
    report_winner(o, setup, baseline, rows);
  } else if (winner) {
    std::printf("the sweep stopped when the CUDA context was lost; the database is unchanged\n");
  } else {
    std::printf("no candidate passed its check and timing; the database is unchanged\n");
  }
  if (!o.output_path.empty()) {
    write_json(o.output_path, described, rows, winner, written);
    std::printf("output:    %s (%zu rows)\n", o.output_path.c_str(), rows.size());
  }
  if (!o.plot_path.empty()) {
    if (winner)
      std::printf("%s\n", render_plot(o.plot_path, tune_figure(described, rows)).message.c_str());
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
      "tune",
      "sweep tile configurations on this GPU (--op bwd: of the backward's main kernel), check and time each, "
      "write the fastest to the tuning database");
  auto o = std::make_shared<TuneOptions>();
  add_op_option(*app, o->op,
                "tune the backward of the call (the main kernel's tiles: the fused kernel's where a fused "
                "family serves the call, else and with --deterministic the separate pass's; each checked "
                "against the reference gradients and timed as a whole backward call)");
  app->add_option(
         "--kernel", o->kernel,
         "with --op bwd: main, the main kernel (dK, dV; the fused one adds dQ too), or dq, the "
         "deterministic mode's dQ pass (sm_90a: with --deterministic); the other kernels keep their tuned or "
         "default tiles while it is swept")
      ->capture_default_str()
      ->check(CLI::IsMember({"main", "dq"}));
  app->add_flag(
      "--deterministic", o->deterministic,
      "with --op bwd: tune the deterministic mode's kernels (main kernel and atomic-free dQ pass) "
      "instead of the fused kernel that non-deterministic calls run where a fused family serves them");
  app->add_option("--dtype", o->dtype, "element type")->required()->check(dtype_validator());
  app->add_option("--head-dim", o->head_dim, "head dimension")->required()->check(head_dim_validator());
  app->add_option("--seqlen", o->seqlen, "query sequence length")->required()->check(count_validator());
  app->add_option("--kv-seqlen", o->kv_seqlen, "key/value sequence length (default: --seqlen)")
      ->check(count_validator());
  app->add_option("--batch", o->batch, "batch size of the timed call")
      ->capture_default_str()
      ->check(count_validator());
  app->add_option("--heads", o->heads, "heads of the timed call")
      ->capture_default_str()
      ->check(count_validator());
  app->add_option("--mask", o->mask, "mask")->capture_default_str()->check(mask_validator());
  app->add_option("--space", o->space, "quick: the larger tiles and the default; full: every one that fits")
      ->capture_default_str()
      ->check(space_validator());
  app->add_option("--top", o->top, "rows of the table (failures are always shown)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(kMaxCount)));
  app->add_flag("--dry-run", o->dry_run, "list the candidates and stop (no GPU needed)");
  app->add_flag("--compile", o->compile,
                "with --dry-run: compile the candidates through the cache (NVRTC, no GPU needed) and list "
                "their registers, spills and the blocks per SM they allow");
  o->target.add_to(*app,
                   "with --dry-run: the arch whose limits to list for, e.g. sm_90a (default: the GPU's)");
  o->tile.add_to(*app);
  app->add_option("--output", o->output_path,
                  "write one JSON document to FILE: the setup, the winner and every row (the table stays "
                  "on stdout)");
  app->add_option("--plot", o->plot_path,
                  "draw TFLOP/s over block M x block N to FILE.png/.svg/.pdf with gnuplot, else matplotlib; "
                  "FILE.gp and FILE.dat keep the script and data (without either plotter, or for FILE.gp, "
                  "only these are written)");
  app->add_option("--jobs,-j", o->jobs, "parallel compiles (default: the number of cores)")
      ->check(CLI::Range(1u, 1024u));
  CLI::Option* iters = add_timing_options(*app, o->warmup, o->iters, "per candidate");
  add_deprecated_alias(*app, "--repeats", iters, o->iters);
  app->add_option("--seed", o->seed, "random seed of the inputs")->capture_default_str();
  return {app, [o] { return execute_tune(*o); }};
}

}  // namespace flashrtc::cli

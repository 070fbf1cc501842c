// `flashrtc bench`: forward attention over the standard grid (or given shapes), timed by its
// protocol: kernels compiled and warmed first, fresh random normal inputs, the L2 cache evicted before each
// timed launch, CUDA-event median, TFLOP/s = 4 B H Nq Nk d (halved when causal) / median. --op decode:
// attention_with_kvcache by the same protocol, in GB/s (bench_decode.cpp); --op varlen:
// attention_varlen_forward over one packed batch of ragged lengths (bench_varlen.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_decode.hpp"
#include "bench_plan.hpp"
#include "bench_protocol.hpp"
#include "bench_varlen.hpp"
#include "cli_support.hpp"
#include "config_backward.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc_tools/backward_bench.hpp"
#include "flashrtc_tools/bench_plot.hpp"
#include "flashrtc_tools/host_tensors.hpp"
#include "flashrtc_tools/json_fields.hpp"
#include "json_output.hpp"
#include "varlen_lengths.hpp"

namespace flashrtc::cli {

using namespace flashrtc::tools;

namespace {

struct BenchOptions {
  std::vector<std::string> dtypes = {"bf16", "fp16"};
  std::vector<std::string> masks = {"none", "causal"};
  std::vector<std::int64_t> head_dims = kGridHeadDims;
  std::vector<std::int64_t> seqlens = kGridSeqlens;
  std::vector<std::string> shapes;
  std::string plot_path, from_path;
  std::string layout = tools::to_string(kDefaultLayout);
  int warmup = 10, iters = 100;
  bool no_l2_flush = false, lse = false, json = false, dry_run = false;
  std::string op =
      "fwd";  // or "bwd": the backward of each point (2.5 x the forward's FLOPs: five products against two)
  bool deterministic = false;                // bwd: BackwardParams::deterministic
  DecodeOptions decode;                      // decode: the cache's shapes (varlen: its --heads, --heads-kv)
  std::string lengths = "uniform:128:8192";  // varlen: the batch's sequence lengths (varlen_lengths.hpp)
  std::int64_t total_tokens = 65536;
  CLI::Option* varlen_options[2] = {};  // --lengths, --total-tokens: only with --op varlen
  // Given on the command line: --op decode takes some of them and refuses the others.
  CLI::Option *mask_option = nullptr, *layout_option = nullptr, *forward_only[4] = {};
  std::uint64_t seed = 1;
  TileOptions tile;
  TargetOptions target;
};

struct Measurement {
  double median_ms = 0, min_ms = 0, compile_ms = 0;
  CacheSource source = CacheSource::kCompiled;
  std::string error;  // a point that failed on the device; the others still run
};

struct Buffers {
  const void *q = kValidationPlaceholder, *k = kValidationPlaceholder, *v = kValidationPlaceholder,
             *o = kValidationPlaceholder;
  float* lse = nullptr;
};

// tile: the resolved tile with --block-m etc. applied, passed as the call's explicit config when any was
// given.
ForwardParams params_for(const BenchPoint& point, Layout layout, const std::optional<TileConfig>& tile,
                         const Buffers& b) {
  const BenchShape& s = point.shape;
  ForwardParams p;
  p.dtype = point.dtype;
  p.mask = point.mask;
  p.batch = s.batch;
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.seqlen_q = s.seqlen_q;
  p.seqlen_kv = s.seqlen_kv;
  p.head_dim = s.head_dim;
  p.q = make_tensor_ref(layout, b.q, s.seqlen_q, s.heads_q, s.head_dim);
  p.k = make_tensor_ref(layout, b.k, s.seqlen_kv, s.heads_kv, s.head_dim);
  p.v = make_tensor_ref(layout, b.v, s.seqlen_kv, s.heads_kv, s.head_dim);
  p.o = make_tensor_ref(layout, b.o, s.seqlen_q, s.heads_q, s.head_dim);
  p.lse = b.lse;
  p.config = tile;
  return p;
}

std::int64_t q_elements(const BenchShape& s) {
  return s.batch * s.seqlen_q * s.heads_q * s.head_dim;
}
std::int64_t kv_elements(const BenchShape& s) {
  return s.batch * s.seqlen_kv * s.heads_kv * s.head_dim;
}

double median(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

class Report {
 public:
  Report(bool json, const std::string& layout, const std::string& gpu, const std::string& op)
      : json_(json), layout_(layout), gpu_(gpu), op_(op) {}

  void header() const {
    if (json_) return;
    std::printf(kFormat, "dtype", "mask", "B", "H", "Hkv", "N", "Nk", "d", "tile (m,n,warps,stages)", "GFLOP",
                "median ms", "min ms", "TFLOP/s");
  }

  void row(const BenchPoint& point, const ForwardParams& p, const KernelSpec& spec,
           const std::optional<Measurement>& m) const {
    const BenchShape& s = point.shape;
    const double flops = op_ == "bwd" ? attention_backward_flops(backward_of(p)) : attention_flops(p);
    if (json_) {
      Json j;
      j["provider"] = "flashrtc";
      j["mode"] = op_;
      j["dtype"] = torch_dtype_name(point.dtype);
      j["B"] = s.batch;
      j["H"] = s.heads_q;
      j["N"] = s.seqlen_q;
      j["d"] = s.head_dim;
      j["causal"] = point.mask != MaskKind::kNone;
      j["Hkv"] = s.heads_kv;
      j["Nk"] = s.seqlen_kv;
      j["mask"] = std::string(to_string(point.mask));
      j["layout"] = layout_;
      j["tile"] = spec.tile;
      j["gflop"] = flops / 1e9;
      if (m && m->error.empty()) {
        // Rounded as the peers' rows are: 4 decimals of ms, 1 of TFLOP/s.
        j["ms"] = std::round(m->median_ms * 1e4) / 1e4;
        j["min_ms"] = std::round(m->min_ms * 1e4) / 1e4;
        j["tflops"] = std::round(flops / (m->median_ms * 1e-3) / 1e12 * 10) / 10;
        j["compile_ms"] = m->compile_ms;
        j["kernel_from"] = to_string(m->source);
      } else if (m) {
        j["error"] = m->error;
      }
      if (!gpu_.empty()) j["gpu"] = gpu_;
      print_json_line(j);
      return;
    }
    const auto text = [](auto value) { return std::to_string(value); };
    const auto fixed = [](double value, const char* format) {
      char out[32];
      std::snprintf(out, sizeof(out), format, value);
      return std::string(out);
    };
    const std::string tile = text(spec.tile.block_m) + "," + text(spec.tile.block_n) + "," +
                             text(spec.tile.warps) + "," + text(spec.tile.stages);
    std::string median_ms = "-", min_ms = "-", tflops = "-";
    if (m && m->error.empty()) {
      median_ms = fixed(m->median_ms, "%.4f");
      min_ms = fixed(m->min_ms, "%.4f");
      tflops = fixed(flops / (m->median_ms * 1e-3) / 1e12, "%.1f");
    } else if (m) {
      tflops = "error: " + m->error;
    }
    std::printf(kFormat, std::string(to_string(point.dtype)).c_str(),
                std::string(to_string(point.mask)).c_str(), text(s.batch).c_str(), text(s.heads_q).c_str(),
                text(s.heads_kv).c_str(), text(s.seqlen_q).c_str(), text(s.seqlen_kv).c_str(),
                text(s.head_dim).c_str(), tile.c_str(), fixed(flops / 1e9, "%.1f").c_str(), median_ms.c_str(),
                min_ms.c_str(), tflops.c_str());
  }

 private:
  static constexpr const char* kFormat = "%-5s %-9s %4s %4s %4s %6s %6s %4s %-24s %9s %10s %10s %8s\n";
  bool json_;
  std::string layout_, gpu_, op_;
};

// Every point checked, and its specialization chosen for target, before any device work: a bad --shape
// fails with exit 2 on any machine, naming the point.
// --op bwd: the spec of the backward's main kernel, the one backward_operations runs (fused unless
// deterministic), whose tile is shown and set.
std::vector<KernelSpec> plan_specs(const std::vector<BenchPoint>& points, Layout layout,
                                   const DeviceTarget& target, const BenchOptions& o) {
  std::vector<KernelSpec> specs;
  for (const BenchPoint& point : points) {
    try {
      const ForwardParams p = params_for(point, layout, std::nullopt, Buffers{});
      select_forward_spec(p);  // the point's checks, as a call makes them
      const ConfigQuery query = config_query(p);
      if (o.op == "bwd") {
        const BackwardKernel main = resolve_backward(query, o.deterministic, o.tile, target)[1];
        specs.push_back(call_kernel_spec(main.query, main.resolution));
        continue;
      }
      specs.push_back(call_kernel_spec(query, o.tile.resolve(query, target)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kUnsupported) throw;
      throw UsageError(std::string(to_string(point.dtype)) + " " + std::string(to_string(point.mask)) + " " +
                       describe(point.shape) + ": " + e.message());
    }
  }
  return specs;
}

// One point: fresh inputs, compile outside the timing, warm-up, then `iters` launches queued back to back,
// each between its own pair of events and after an asynchronous L2 eviction, so the GPU never waits for the
// host inside a timed interval (do_bench's protocol).
Measurement measure(ForwardParams p, const KernelSpec& spec, const std::string& arch, const BenchOptions& o,
                    std::uint64_t seed, DeviceBuffer& q, DeviceBuffer& k, DeviceBuffer& v,
                    DeviceBuffer* l2_flush, std::vector<unsigned char>& staging) {
  const std::int64_t q_count = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
  const std::int64_t kv_count = p.batch * p.seqlen_kv * p.heads_kv * p.head_dim;
  fill_random_normal(p.dtype, staging, q_count, seed, 0);
  q.copy_from_host(staging.data(), staging.size());
  fill_random_normal(p.dtype, staging, kv_count, seed, 1);
  k.copy_from_host(staging.data(), staging.size());
  fill_random_normal(p.dtype, staging, kv_count, seed, 2);
  v.copy_from_host(staging.data(), staging.size());
  // A copy from pageable memory may return before its DMA ends, on the legacy stream, which the
  // non-blocking stream below does not wait for.
  device_synchronize();

  Measurement m;
  const CompiledKernelInfo kernel = compile_kernel(spec, arch);
  m.compile_ms = kernel.compile_ms;
  m.source = kernel.source;

  std::optional<BackwardBench> backward;
  if (o.op == "bwd") backward.emplace(p, o.deterministic, seed, staging);
  Stream stream;
  p.stream = stream.handle();
  BackwardParams backward_params = backward ? backward->params() : BackwardParams{};
  backward_params.stream = stream.handle();
  const auto launch = [&] { backward ? attention_backward(backward_params) : attention_forward(p); };
  for (int i = 0; i < std::max(1, o.warmup); ++i) launch();  // the first loads the module
  stream.synchronize();
  std::vector<EventTimer> timers(static_cast<std::size_t>(o.iters));
  for (EventTimer& timer : timers) {
    if (l2_flush) l2_flush->fill_bytes_async(0, stream.handle());
    timer.start(stream.handle());
    launch();
    timer.stop(stream.handle());
  }
  stream.synchronize();
  std::vector<float> times_ms;
  for (const EventTimer& timer : timers) times_ms.push_back(timer.elapsed_ms());
  m.median_ms = median(times_ms);
  m.min_ms = *std::min_element(times_ms.begin(), times_ms.end());
  return m;
}

std::vector<BenchShape> shapes_from(const BenchOptions& o) {
  if (o.shapes.empty()) return standard_shapes(o.head_dims, o.seqlens);
  std::vector<BenchShape> shapes;
  for (const std::string& text : o.shapes) shapes.push_back(parse_bench_shape(text));
  return shapes;
}

int execute_decode_bench(const BenchOptions& o) {
  for (const CLI::Option* option : o.forward_only)
    if (option->count() > 0) throw UsageError(option->get_name() + " does not go with --op decode");
  if (o.layout_option->count() > 0)
    throw UsageError("--layout does not go with --op decode: q, o and the cache are [B, N, H, d]");
  if (o.deterministic) throw UsageError("--deterministic goes with --op bwd");
  DecodeBenchOptions d;
  for (const std::string& name : o.dtypes) d.dtypes.push_back(dtype_from(name));
  // The grid's default masks hold top-left causal, which a cache refuses: decode defaults to none.
  if (o.mask_option->count() > 0)
    for (const std::string& name : o.masks) d.masks.push_back(mask_from(name));
  else
    d.masks = {MaskKind::kNone};
  d.head_dims = o.head_dims;
  d.decode = &o.decode;
  d.tile = &o.tile;
  d.target = &o.target;
  d.warmup = o.warmup;
  d.iters = o.iters;
  d.no_l2_flush = o.no_l2_flush;
  d.lse = o.lse;
  d.json = o.json;
  d.dry_run = o.dry_run;
  d.seed = o.seed;
  return run_decode_bench(d);
}

int execute_varlen_bench(const BenchOptions& o) {
  for (const CLI::Option* option : o.forward_only)
    if (option->count() > 0) throw UsageError(option->get_name() + " does not go with --op varlen");
  if (o.layout_option->count() > 0)
    throw UsageError("--layout does not go with --op varlen: q, k, v and o are packed [total, H, d]");
  if (o.deterministic) throw UsageError("--deterministic goes with --op bwd");
  VarlenBenchOptions v;
  for (const std::string& name : o.dtypes) v.dtypes.push_back(dtype_from(name));
  for (const std::string& name : o.masks) v.masks.push_back(mask_from(name));
  v.head_dims = o.head_dims;
  v.lengths = varlen_lengths(o.lengths, o.total_tokens, o.seed);
  if (o.decode.heads_options[0]->count() > 0) v.heads = o.decode.heads;
  v.heads_kv = o.decode.heads_kv;
  if (v.heads_kv && !v.heads) throw UsageError("--heads-kv needs --heads with --op varlen");
  v.tile = &o.tile;
  v.target = &o.target;
  v.warmup = o.warmup;
  v.iters = o.iters;
  v.no_l2_flush = o.no_l2_flush;
  v.lse = o.lse;
  v.json = o.json;
  v.dry_run = o.dry_run;
  v.seed = o.seed;
  return run_varlen_bench(v);
}

int execute_bench(const BenchOptions& o) {
  o.decode.check_mode(o.op);
  for (const CLI::Option* option : o.varlen_options)
    if (option->count() > 0 && o.op != "varlen")
      throw UsageError(option->get_name() + " goes with --op varlen");
  if (o.op == "decode") return execute_decode_bench(o);
  if (o.op == "varlen") return execute_varlen_bench(o);
  if (o.deterministic && o.op != "bwd") throw UsageError("--deterministic goes with --op bwd");
  if (!o.plot_path.empty()) check_plot_target(o.plot_path);  // before any measurement, not after
  if (!o.from_path.empty()) {
    const PlotResult plot = render_plot(
        o.plot_path, bench_figure(read_bench_points(o.from_path), "flashrtc bench: " + o.from_path));
    std::printf("%s\n", plot.message.c_str());
    return kExitOk;
  }
  std::vector<DType> dtypes;
  for (const std::string& name : o.dtypes) dtypes.push_back(dtype_from(name));
  std::vector<MaskKind> masks;
  for (const std::string& name : o.masks) masks.push_back(mask_from(name));
  const Layout layout = *parse_layout(o.layout);
  const std::vector<BenchPoint> points = bench_plan(shapes_from(o), dtypes, masks);
  std::string target_text;
  const std::vector<KernelSpec> specs = plan_specs(points, layout, o.target.target(&target_text), o);
  const auto explicit_tile = [&](std::size_t i) {
    return o.tile.any() ? std::optional<TileConfig>(specs[i].tile) : std::nullopt;
  };

  if (o.dry_run) {
    const Report report(o.json, o.layout, "", o.op);
    if (!o.json) std::printf("%zu points; tiles as chosen for %s\n", points.size(), target_text.c_str());
    report.header();
    for (std::size_t i = 0; i < points.size(); ++i)
      report.row(points[i], params_for(points[i], layout, explicit_tile(i), Buffers{}), specs[i],
                 std::nullopt);
    return kExitOk;
  }

  if (!device_available())
    throw Error(ErrorCode::kNoDevice, "no GPU: " + device_unavailable_reason() +
                                          " (`flashrtc bench --dry-run` lists the points without one)");
  const DeviceInfo device = current_device();
  const std::string arch =
      runtime_config().arch_override.empty() ? device.arch : runtime_config().arch_override;
  o.target.require_device(device.name, arch);
  if (!o.json)
    std::printf("gpu: %s (%s, %d SMs); layout %s; %d warm-up and %d timed launches per point, L2 %s\n",
                device.name.c_str(), arch.c_str(), device.multiprocessors, o.layout.c_str(), o.warmup,
                o.iters, o.no_l2_flush ? "kept warm" : "evicted before each");

  // One set of buffers, sized for the largest point, serves the whole plan.
  std::int64_t q_max = 0, kv_max = 0, lse_max = 0;
  std::size_t elem_max = 0;
  for (const BenchPoint& point : points) {
    elem_max = std::max(elem_max, dtype_size(point.dtype));
    q_max = std::max(q_max, q_elements(point.shape));
    kv_max = std::max(kv_max, kv_elements(point.shape));
    lse_max = std::max(lse_max, point.shape.batch * point.shape.heads_q * point.shape.seqlen_q);
  }
  DeviceBuffer q(q_max * elem_max), k(kv_max * elem_max), v(kv_max * elem_max), out(q_max * elem_max);
  DeviceBuffer lse(o.lse ? static_cast<std::size_t>(lse_max) * sizeof(float) : 0);
  std::optional<DeviceBuffer> l2_flush;
  if (!o.no_l2_flush) l2_flush.emplace(kL2FlushBytes);
  const Buffers buffers{q.data(), k.data(), v.data(), out.data(),
                        o.lse ? static_cast<float*>(lse.data()) : nullptr};

  const Report report(o.json, o.layout, device.name, o.op);
  report.header();
  std::vector<unsigned char> staging;
  std::vector<BenchPlotPoint> plotted;
  int failed = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const ForwardParams p = params_for(points[i], layout, explicit_tile(i), buffers);
    Measurement m;
    try {
      m = measure(p, specs[i], arch, o, o.seed + i, q, k, v, l2_flush ? &*l2_flush : nullptr, staging);
    } catch (const Error& e) {
      m.error = std::string(to_string(e.code())) + ": " + e.message();
      ++failed;
    }
    report.row(points[i], p, specs[i], m);
    if (m.error.empty())
      plotted.push_back({bench_series(torch_dtype_name(points[i].dtype), points[i].shape.head_dim,
                                      std::string(to_string(points[i].mask))),
                         points[i].shape.seqlen_q, attention_flops(p) / (m.median_ms * 1e-3) / 1e12});
  }
  // After the rows, on stderr under --json so that stdout stays JSON lines.
  if (!o.plot_path.empty() && !plotted.empty())
    std::fprintf(
        o.json ? stderr : stdout, "%s\n",
        render_plot(o.plot_path, bench_figure(plotted, "flashrtc bench on " + device.name)).message.c_str());
  if (failed) std::fprintf(stderr, "flashrtc: error: %d of %zu points failed\n", failed, points.size());
  return failed ? kExitDevice : kExitOk;
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "bench",
      "time the forward (--op bwd: the backward) over the standard grid (16k tokens, model dim 2048) "
      "or --shape: "
      "CUDA-event median, TFLOP/s");
  auto o = std::make_shared<BenchOptions>();
  app->add_option("--dtype", o->dtypes, "element types, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(dtype_validator());
  o->mask_option =
      app->add_option("--mask", o->masks,
                      "masks, comma-separated: none, causal (top-left), causal-br (--op decode: none, the "
                      "default, or causal-br)")
          ->delimiter(',')
          ->capture_default_str()
          ->check(mask_validator());
  CLI::Option* head_dim = app->add_option("--head-dim", o->head_dims, "grid head dims (H = 2048 / d)")
                              ->delimiter(',')
                              ->capture_default_str()
                              ->check(head_dim_validator());
  CLI::Option* seqlen = app->add_option("--seqlen", o->seqlens, "grid sequence lengths (B = 16384 / N)")
                            ->delimiter(',')
                            ->capture_default_str()
                            ->check(count_validator());
  CLI::Option* shape =
      app->add_option("--shape", o->shapes,
                      "B,H,N,d[,Nk[,Hkv]] instead of the grid (repeatable): key length Nk and kv heads Hkv "
                      "default to N and H")
          ->excludes(head_dim)
          ->excludes(seqlen);
  o->layout_option = app->add_option("--layout", o->layout,
                                     "bhnd = [B,H,N,d] (the peers' tensors), bnhd = [B,N,H,d]; contiguous")
                         ->capture_default_str()
                         ->check(layout_validator());
  add_timing_options(*app, o->warmup, o->iters, "per point", " (at least one runs)");
  app->add_flag("--no-l2-flush", o->no_l2_flush, "keep the L2 cache warm between timed launches");
  app->add_flag("--lse", o->lse, "also write the log-sum-exp (as a training forward would)");
  add_op_option(
      *app, o->op, "the backward (dQ, dK, dV) of each point, TFLOP/s at 2.5 x the forward's FLOPs",
      "attention_with_kvcache over a cache of each --batch x --seqlen-kv x --page-size (and "
      "--dtype, --head-dim, --mask), random data, a shuffled block table when paged, every sequence "
      "holding --seqlen-kv tokens: microseconds and GB/s of the K/V read plus q and o",
      "attention_varlen_forward over one packed batch of --lengths (queries and keys alike; --heads, "
      "--heads-kv), per --dtype, --head-dim and --mask: TFLOP/s and tokens/s of the real tokens");
  app->add_flag("--deterministic", o->deterministic,
                "with --op bwd: the deterministic mode (the main kernel and an atomic-free dQ pass; default: "
                "where a fused family serves the call, sm_90a, one kernel that adds dQ with fp32 atomics)");
  app->add_option("--seed", o->seed, "random seed of the first point's inputs (point i uses seed + i)")
      ->capture_default_str();
  app->add_flag("--json", o->json,
                "JSON lines: one JSON object per point as it is measured (the peers' fields plus flashrtc's) "
                "instead of a table");
  CLI::Option* dry_run = app->add_flag("--dry-run", o->dry_run,
                                       "list the points, tiles and FLOPs without running (no GPU needed)");
  CLI::Option* plot = app->add_option("--plot", o->plot_path,
                                      "draw TFLOP/s against N, a line per dtype, head dim and mask, to "
                                      "FILE.png/.svg/.pdf with gnuplot, else "
                                      "matplotlib; FILE.gp and FILE.dat keep the script and data (without "
                                      "either plotter, or for FILE.gp, "
                                      "only these are written)")
                          ->excludes(dry_run);
  CLI::Option* from =
      app->add_option("--from", o->from_path,
                      "with --plot: draw the rows of an earlier `bench --json` (or bench/compare.py --json) "
                      "from this file instead of measuring (no GPU needed; a regular file of at most " +
                          format_bytes(double(kMaxBenchRowsBytes)) + ")")
          ->needs(plot);
  o->decode.add_to(*app, true);
  o->varlen_options[0] =
      app->add_option(
             "--lengths", o->lengths,
             "with --op varlen: uniform:LO:HI (drawn with --seed until --total-tokens, the last cut to "
             "fit), equal:L (--total-tokens / L sequences) or N1,N2,...")
          ->capture_default_str();
  o->varlen_options[1] = app->add_option("--total-tokens", o->total_tokens,
                                         "with --op varlen: tokens of the uniform or equal batch")
                             ->capture_default_str()
                             ->check(CLI::Range(std::int64_t(1), kMaxVarlenTokens));
  o->forward_only[0] = shape;
  o->forward_only[1] = seqlen;
  o->forward_only[2] = plot;
  o->forward_only[3] = from;
  o->tile.add_to(*app);
  o->target.add_to(
      *app, "with --dry-run: choose the tiles for this arch's limits, e.g. sm_90a (default: the GPU's)");
  return {app, [o] { return execute_bench(*o); }};
}

}  // namespace flashrtc::cli

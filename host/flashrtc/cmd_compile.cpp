// `flashrtc compile`: warms the cache with a call's kernels (forward or backward) or every default one, and
// shows what ptxas made of them. Needs no GPU when the arch is given.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_support.hpp"
#include "config_backward.hpp"
#include "flashrtc_tools/progress.hpp"
#include "json_output.hpp"

namespace flashrtc::cli {

namespace {

struct CompileOptions {
  std::string op = "fwd", dtype, mask = "none";
  bool op_given = false;  // --all narrows by --op only when it is given
  int head_dim = 0;
  std::optional<std::int64_t> seqlen, kv_seqlen;
  TileOptions tile;
  TargetOptions target;
  VariantOptions variants;
  bool all = false, json = false, deterministic = false;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
};

void print_details(const KernelSpec& spec, const ConfigResolution& resolution,
                   const CompiledKernelInfo& info) {
  const ResourceReport& r = info.resources;
  const std::size_t smem = family_of(spec).smem_bytes(spec);
  std::printf("key:            %s\n", info.key.c_str());
  std::printf("name:           %s\n", info.name_expression.c_str());
  std::printf("lowered name:   %s\n", info.lowered_name.c_str());
  std::printf("arch:           %s\n", info.arch.c_str());
  std::printf("tile:           %s\n", to_string(spec.tile).c_str());
  std::printf("tile source:    %s (%s)\n", to_string(resolution.source), resolution.why.c_str());
  std::printf("registers:      %d per thread\n", r.registers);
  std::printf("spill stores:   %d bytes\n", r.spill_store_bytes);
  std::printf("spill loads:    %d bytes\n", r.spill_load_bytes);
  std::printf("stack frame:    %d bytes\n", r.stack_frame_bytes);
  std::printf("static smem:    %d bytes\n", r.static_smem_bytes);
  std::printf("dynamic smem:   %zu bytes (%s)\n", smem, format_bytes(static_cast<double>(smem)).c_str());
  std::printf("compile:        %.1f ms\n", info.compile_ms);
  std::printf("from:           %s\n", to_string(info.source));
  if (!info.entry_dir.empty()) std::printf("entry:          %s\n", info.entry_dir.string().c_str());
  if (r.spills()) std::printf("warning: this specialization spills registers to local memory\n");
  if (r.wgmma_serialized)
    std::printf(
        "warning: ptxas serialized this kernel's wgmma.mma_async instructions (%s): a wait after "
        "each, about half the tensor-core rate\n",
        r.wgmma_serialized_reason.c_str());
}

constexpr const char* kRowFormat = "%9s %-5s %4s %-10s %-24s %5s %12s %6s %8s %9s %11s  %-8s %s";

std::string row_text(const char* counter, const char* dtype, const char* head_dim, const char* mask,
                     const char* tile, const char* registers, const char* spills, const char* stack,
                     const char* static_smem, const char* dynamic_smem, const char* compile_ms,
                     const char* from, const char* family) {
  char line[512];
  std::snprintf(line, sizeof(line), kRowFormat, counter, dtype, head_dim, mask, tile, registers, spills,
                stack, static_smem, dynamic_smem, compile_ms, from, family);
  return line;
}

std::string header_text() {
  return row_text("#", "dtype", "d", "mask", "tile (m,n,warps,stages)", "regs", "spill st/ld", "stack",
                  "static", "dyn smem", "compile ms", "from", "family");
}

// counter: "3/51", the row's place in the whole list; over_margin marks the registers with a '!'. A kernel
// whose wgmma ptxas serialized says so after its family.
std::string row_text(const std::string& counter, const KernelSpec& spec, const CompiledKernelInfo& info,
                     bool over_margin = false) {
  const ResourceReport& r = info.resources;
  const auto text = [](auto value) { return std::to_string(value); };
  const std::string tile = text(spec.tile.block_m) + "," + text(spec.tile.block_n) + "," +
                           text(spec.tile.warps) + "," + text(spec.tile.stages);
  char compile_ms[32];
  std::snprintf(compile_ms, sizeof(compile_ms), "%.1f", info.compile_ms);
  return row_text(counter.c_str(), std::string(to_string(spec.dtype)).c_str(), text(spec.head_dim).c_str(),
                  std::string(to_string(spec.mask)).c_str(), tile.c_str(),
                  (text(r.registers) + (over_margin ? "!" : "")).c_str(),
                  (text(r.spill_store_bytes) + "/" + text(r.spill_load_bytes)).c_str(),
                  text(r.stack_frame_bytes).c_str(), text(r.static_smem_bytes).c_str(),
                  text(family_of(spec).smem_bytes(spec)).c_str(), compile_ms, to_string(info.source),
                  (family_of(spec).name + (r.wgmma_serialized ? "  wgmma serialized" : "")).c_str());
}

std::string failed_row_text(const std::string& counter, const KernelSpec& spec) {
  char line[256];
  std::snprintf(line, sizeof(line), "%9s %-5s %4d %-10s FAILED (see below)", counter.c_str(),
                std::string(to_string(spec.dtype)).c_str(), spec.head_dim,
                std::string(to_string(spec.mask)).c_str());
  return line;
}

// The compiled kernel as `cache ls --json` lists its entry, and where this process got it ("from").
Json kernel_json(const KernelSpec& spec, const CompiledKernelInfo& info) {
  const KernelFamily& family = family_of(spec);
  Json specialization = spec;
  specialization.erase("family");  // the entry's "kernel"
  Json kernel =
      json_detail::kernel_entry<Json>(info, family.name, std::move(specialization), family.smem_bytes(spec));
  kernel["from"] = to_string(info.source);
  return kernel;
}

// One specialization of compile --all: {"n", "total", "specialization", "kernel"} or, when it failed,
// {"n", "total", "specialization", "error": {"kind", "message"}}.
Json row_json(std::size_t n, std::size_t total, const KernelSpec& spec, const CompiledKernelInfo* info,
              const std::exception* error) {
  Json row{{"n", n}, {"total", total}, {"specialization", spec}};
  if (info) row["kernel"] = kernel_json(spec, *info);
  if (error) {
    const auto* flashrtc_error = dynamic_cast<const Error*>(error);
    row["error"] = {{"kind", flashrtc_error ? to_string(flashrtc_error->code()) : "internal"},
                    {"message", flashrtc_error ? flashrtc_error->message() : std::string(error->what())}};
  }
  return row;
}

// The kernels of --all that --op, --dtype and --head-dim leave, in order; narrowed says by what ("" for
// none).
std::vector<KernelSpec> narrowed_specs(std::vector<KernelSpec> specs, const CompileOptions& o,
                                       std::string& narrowed) {
  narrowed.clear();
  if (o.op_given) narrowed += " --op " + o.op;
  if (!o.dtype.empty()) narrowed += " --dtype " + o.dtype;
  if (o.head_dim) narrowed += " --head-dim " + std::to_string(o.head_dim);
  const auto unwanted = [&](const KernelSpec& spec) {
    const Operation op = spec.family->operation;
    const bool backward = op != Operation::kForward && op != Operation::kForwardVarlen;
    return (o.op_given && backward != (o.op == "bwd")) ||
           (!o.dtype.empty() && spec.dtype != dtype_from(o.dtype)) ||
           (o.head_dim && spec.head_dim != o.head_dim);
  };
  specs.erase(std::remove_if(specs.begin(), specs.end(), unwanted), specs.end());
  return specs;
}

// Compiles on --jobs threads (NVRTC and the cache are thread-safe) and prints rows in table order as they
// become ready, with a progress line below them on a terminal, then one summary line. --json: JSON lines
// instead, a row each and the summary last.
int compile_all(const std::string& arch, const CompileOptions& o) {
  // The defaults for arch's shared memory, then the tiles tuned for arch: what a deployment's calls use.
  std::string narrowed;
  const std::vector<KernelSpec> specs = narrowed_specs(warm_specs(arch), o, narrowed);
  const std::size_t defaults = narrowed_specs(warm_specs(arch, false), o, narrowed).size();
  if (specs.empty())
    throw UsageError("compile --all" + narrowed + ": no default or tuned kernel for " + arch +
                     " matches (the defaults cover the head dims 32, 64, 96, 128, 256 and those of the "
                     "families' default rows; `compile --dtype --head-dim` compiles any other)");
  const unsigned jobs = o.jobs;
  const bool json = o.json;
  if (!json) {
    std::printf("specializations for %s%s: %zu defaults, %zu tuned (%s)\n", arch.c_str(),
                narrowed.empty() ? "" : (" (" + narrowed.substr(1) + ")").c_str(), defaults,
                specs.size() - defaults, tuning_db_path().string().c_str());
    std::printf("%s\n", header_text().c_str());
  }
  std::optional<tools::Progress> progress;
  if (!json) progress.emplace("compile", specs.size(), false);

  std::vector<std::promise<CompiledKernelInfo>> promises(specs.size());
  std::vector<std::future<CompiledKernelInfo>> results;
  for (auto& promise : promises) results.push_back(promise.get_future());
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned j = 0; j < std::min<std::size_t>(jobs, specs.size()); ++j)
    workers.emplace_back([&] {
      for (std::size_t i = next++; i < specs.size(); i = next++) {
        const KernelSpec& spec = specs[i];
        const std::string what = std::string(to_string(spec.dtype)) + " d=" + std::to_string(spec.head_dim) +
                                 " " + std::string(to_string(spec.mask)) + " " + to_string(spec.tile);
        bool compiled = true;
        try {
          promises[i].set_value(compile_kernel(spec, arch));
        } catch (...) {
          promises[i].set_exception(std::current_exception());
          compiled = false;
        }
        if (progress) progress->step(compiled ? what : what + ": FAILED");
      }
    });

  std::exception_ptr first_error;
  std::size_t spilling = 0, serialized = 0, failed = 0, over_margin = 0;
  const auto print = [&](const std::string& line) {
    if (progress)
      progress->note(line);
    else
      std::printf("%s\n", line.c_str());
  };
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string counter = std::to_string(i + 1) + "/" + std::to_string(specs.size());
    try {
      const CompiledKernelInfo info = results[i].get();
      // Defaults are held to the register margin; tuned tiles were measured on their GPU as they are.
      const bool over = i < defaults && info.resources.registers > kDefaultMaxRegisters;
      spilling += info.resources.spills() ? 1 : 0;
      serialized += info.resources.wgmma_serialized ? 1 : 0;
      over_margin += over ? 1 : 0;
      if (json)
        print_json_line(row_json(i + 1, specs.size(), specs[i], &info, nullptr));
      else
        print(row_text(counter, specs[i], info, over));
    } catch (const std::exception& e) {
      ++failed;
      if (!first_error) first_error = std::current_exception();
      if (json)
        print_json_line(row_json(i + 1, specs.size(), specs[i], nullptr, &e));
      else
        print(failed_row_text(counter, specs[i]));
    }
  }
  for (std::thread& worker : workers) worker.join();
  progress.reset();

  const CacheStats stats = cache_stats();
  if (json) {
    Json summary{{"arch", arch},
                 {"total", specs.size()},
                 {"defaults", defaults},
                 {"tuned", specs.size() - defaults},
                 {"ready", specs.size() - failed},
                 {"failed", failed},
                 {"spilling", spilling},
                 {"wgmma_serialized", serialized},
                 {"over_register_margin", over_margin},
                 {"register_margin", kDefaultMaxRegisters}};
    summary.update(Json(stats));
    summary["cache"] = cache_root().string();
    summary["tuning_db"] = tuning_db_path().string();
    print_json_line(Json{{"summary", summary}});
  } else {
    std::printf(
        "done: %zu of %zu ready, %zu failed (compiled %llu, from disk %llu, from memory %llu); %zu spilling; "
        "%zu wgmma serialized; %zu of %zu defaults over the %d-register margin (marked !); cache %s\n",
        specs.size() - failed, specs.size(), failed, static_cast<unsigned long long>(stats.compiles),
        static_cast<unsigned long long>(stats.disk_hits), static_cast<unsigned long long>(stats.memory_hits),
        spilling, serialized, over_margin, defaults, kDefaultMaxRegisters, cache_root().string().c_str());
  }
  if (first_error) std::rethrow_exception(first_error);
  return kExitOk;
}

// Each kernel of the call's backward as config --op bwd resolves them (backward_operations: the fused kernel
// and the dQ conversion, or with --deterministic the main kernel and the dQ pass), the tile options the main
// kernel's.
int compile_backward(const ConfigQuery& query, const CompileOptions& options, const DeviceTarget& target,
                     const std::string& arch) {
  Json kernels = Json::array();
  bool first = true;
  for (BackwardKernel& k : resolve_backward(query, options.deterministic, options.tile, target)) {
    if (!options.seqlen) k.resolution.why += "; no length given: --seqlen picks a call's tuned tile";
    const KernelSpec spec = call_kernel_spec(k.query, k.resolution);
    const CompiledKernelInfo info = compile_kernel(spec, arch);
    if (options.json) {
      kernels.push_back(Json{{"role", backward_role(k.operation)},
                             {"specialization", spec},
                             {"resolution", k.resolution},
                             {"kernel", kernel_json(spec, info)}});
      continue;
    }
    std::printf("%s%s %s\n", first ? "" : "\n", backward_label(k.operation), family_of(spec).name.c_str());
    first = false;
    print_details(spec, k.resolution, info);
  }
  if (options.json) print_json_document(Json{{"op", "bwd"}, {"kernels", std::move(kernels)}});
  return kExitOk;
}

int execute_compile(const CompileOptions& options) {
  if (!options.all && (options.dtype.empty() || options.head_dim == 0))
    throw UsageError("compile needs --dtype and --head-dim, or --all (which they narrow)");
  const std::string arch = compile_arch(options.target.arch);
  if (options.all && options.deterministic)
    throw UsageError("--deterministic goes with --op bwd without --all (which compiles both modes' kernels)");
  if (options.all) {
    options.variants.refuse_for("--all");
    return compile_all(arch, options);
  }
  // The kernel a call of this shape would resolve to on the target of arch; without a length, the one for
  // long sequences, and no tuned entry (they are kept per length).
  ConfigQuery query;
  query.dtype = dtype_from(options.dtype);
  query.head_dim = options.head_dim;
  query.mask = mask_from(options.mask);
  query.seqlen_q = options.seqlen.value_or(0);
  query.seqlen_kv = options.kv_seqlen.value_or(query.seqlen_q);
  TargetOptions for_arch = options.target;
  for_arch.arch = arch;
  DeviceTarget target = for_arch.target();
  if (!options.seqlen) target.gpu_name.clear();
  if (options.op == "bwd") {
    options.variants.refuse_for("--op bwd");
    return compile_backward(query, options, target, arch);
  }
  query.variants = variant_bits(options.variants.variants());
  if (options.deterministic) throw UsageError("--deterministic goes with --op bwd");
  ConfigResolution resolution = options.tile.resolve(query, target);
  if (!options.seqlen) resolution.why += "; no length given: --seqlen picks a call's tuned tile";
  const KernelSpec spec = call_kernel_spec(query, resolution);
  const CompiledKernelInfo info = compile_kernel(spec, arch);
  if (options.json) {
    print_json_document(
        Json{{"specialization", spec}, {"resolution", resolution}, {"kernel", kernel_json(spec, info)}});
    return kExitOk;
  }
  print_details(spec, resolution, info);
  return kExitOk;
}

}  // namespace

Command add_compile_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "compile",
      "compile a call's kernel (--op bwd: its backward's kernels; --all: every default kernel, forward and "
      "backward) into the cache and print their resources (no GPU needed with --arch)");
  auto options = std::make_shared<CompileOptions>();
  CLI::Option* op = add_op_option(
      *app, options->op,
      "the kernels of the call's backward (pre-pass, main kernel, then the dQ conversion of the fused "
      "kernel or the dQ pass; the tile options are the main kernel's); with --all, only the forward's or "
      "only the backward's kernels");
  app->add_option("--dtype", options->dtype, "element type")->check(dtype_validator());
  app->add_option("--head-dim", options->head_dim, "head dimension")->check(head_dim_validator());
  CLI::Option* mask =
      app->add_option("--mask", options->mask, "mask")->capture_default_str()->check(mask_validator());
  options->target.add_to(*app, "target arch, e.g. sm_80, sm_90a (default: FLASHRTC_ARCH, else the GPU's)");
  CLI::Option* seqlen =
      app->add_option("--seqlen", options->seqlen,
                      "query length of the call whose tile to compile (default: the tile for long sequences)")
          ->check(count_validator());
  CLI::Option* kv_seqlen =
      app->add_option("--kv-seqlen", options->kv_seqlen, "key/value length (default: --seqlen)")
          ->check(count_validator())
          ->needs(seqlen);
  options->tile.add_to(*app);
  options->variants.add_to(*app);
  CLI::Option* all = app->add_flag(
      "--all", options->all,
      "every dtype (fp32, fp16, bf16) x head dim {32,64,96,128,256} x mask with the default tile "
      "for the arch, plus every tile tuned for the arch (the tuning database); --op, --dtype and --head-dim "
      "narrow it");
  app->add_flag(
      "--deterministic", options->deterministic,
      "with --op bwd: the deterministic mode's kernels (main kernel and atomic-free dQ pass; default: "
      "the fused kernel where a fused family serves the call)");
  app->add_option("--jobs,-j", options->jobs, "parallel compiles for --all (default: the number of cores)")
      ->check(CLI::Range(1u, 1024u));
  app->add_flag("--json", options->json,
                "one JSON document {specialization, resolution, kernel} (--op bwd: {op, kernels: [{role, "
                "specialization, resolution, kernel}]}); with --all JSON lines, one "
                "{n, total, specialization, kernel or error} per specialization and a last {summary}");
  all->excludes("--gpu-name")->excludes(mask)->excludes(seqlen)->excludes(kv_seqlen);
  for (const char* tile_flag : {"--block-m", "--block-n", "--warps", "--stages"}) all->excludes(tile_flag);
  return {app, [options, op] {
            options->op_given = op->count() > 0;
            return execute_compile(*options);
          }};
}

}  // namespace flashrtc::cli

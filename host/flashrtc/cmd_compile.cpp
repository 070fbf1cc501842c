// `flashrtc compile`: warms the cache with forward specializations and shows what ptxas made of them.
// Needs no GPU when the arch is given.
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

namespace flashrtc::cli {

namespace {

struct CompileOptions {
  std::string dtype, mask = "none";
  int head_dim = 0;
  std::optional<std::int64_t> seqlen, kv_seqlen;
  TileOptions tile;
  TargetOptions target;
  bool all = false;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
};

void print_details(const ForwardSpec& spec, const ConfigResolution& resolution,
                   const CompiledKernelInfo& info) {
  const ResourceReport& r = info.resources;
  const std::size_t smem = forward_smem_bytes(spec.dtype, spec.head_dim, spec.tile);
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
}

constexpr const char* kRowFormat = "%9s %-5s %4s %-10s %-24s %5s %12s %6s %8s %9s %11s  %-8s %s\n";

void print_header() {
  std::printf(kRowFormat, "#", "dtype", "d", "mask", "tile (m,n,warps,stages)", "regs", "spill st/ld",
              "stack", "static", "dyn smem", "compile ms", "from", "family");
}

// counter: "3/51", the row's place in the whole list.
void print_row(const std::string& counter, const ForwardSpec& spec, const CompiledKernelInfo& info) {
  const ResourceReport& r = info.resources;
  const auto text = [](auto value) { return std::to_string(value); };
  const std::string tile = text(spec.tile.block_m) + "," + text(spec.tile.block_n) + "," +
                           text(spec.tile.warps) + "," + text(spec.tile.stages);
  char compile_ms[32];
  std::snprintf(compile_ms, sizeof(compile_ms), "%.1f", info.compile_ms);
  std::printf(kRowFormat, counter.c_str(), std::string(to_string(spec.dtype)).c_str(),
              text(spec.head_dim).c_str(), std::string(to_string(spec.mask)).c_str(), tile.c_str(),
              text(r.registers).c_str(), (text(r.spill_store_bytes) + "/" + text(r.spill_load_bytes)).c_str(),
              text(r.stack_frame_bytes).c_str(), text(r.static_smem_bytes).c_str(),
              text(family_of(spec).smem_bytes(spec)).c_str(), compile_ms, to_string(info.source),
              family_of(spec).name.c_str());
}

// Compiles on `jobs` threads (NVRTC and the cache are thread-safe) and prints rows in table order.
int compile_all(const std::string& arch, unsigned jobs) {
  // The defaults for arch's shared memory, then the tiles tuned for arch: what a deployment's calls use.
  const std::vector<ForwardSpec> specs = warm_forward_specs(arch);
  std::vector<std::promise<CompiledKernelInfo>> promises(specs.size());
  std::vector<std::future<CompiledKernelInfo>> results;
  for (auto& promise : promises) results.push_back(promise.get_future());
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned j = 0; j < std::min<std::size_t>(jobs, specs.size()); ++j)
    workers.emplace_back([&] {
      for (std::size_t i = next++; i < specs.size(); i = next++) {
        try {
          promises[i].set_value(compile_forward(specs[i], arch));
        } catch (...) {
          promises[i].set_exception(std::current_exception());
        }
      }
    });

  const std::size_t defaults = warm_forward_specs(arch, false).size();
  std::printf("specializations for %s: %zu defaults, %zu tuned (%s)\n", arch.c_str(), defaults,
              specs.size() - defaults, tuning_db_path().string().c_str());
  print_header();
  std::exception_ptr first_error;
  int spilling = 0;
  std::size_t failed = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string counter = std::to_string(i + 1) + "/" + std::to_string(specs.size());
    try {
      const CompiledKernelInfo info = results[i].get();
      print_row(counter, specs[i], info);
      spilling += info.resources.spills() ? 1 : 0;
    } catch (const std::exception& e) {
      std::printf("%9s %-5s %4d %-10s FAILED (see below)\n", counter.c_str(),
                  std::string(to_string(specs[i].dtype)).c_str(), specs[i].head_dim,
                  std::string(to_string(specs[i].mask)).c_str());
      ++failed;
      if (!first_error) first_error = std::current_exception();
    }
    std::fflush(stdout);
  }
  for (std::thread& worker : workers) worker.join();

  const CacheStats stats = cache_stats();
  std::printf(
      "done: %zu of %zu ready, %zu failed (compiled %llu, from disk %llu, from memory %llu); %d spilling; "
      "cache %s\n",
      specs.size() - failed, specs.size(), failed, static_cast<unsigned long long>(stats.compiles),
      static_cast<unsigned long long>(stats.disk_hits), static_cast<unsigned long long>(stats.memory_hits),
      spilling, cache_root().string().c_str());
  if (first_error) std::rethrow_exception(first_error);
  return kExitOk;
}

int execute_compile(const CompileOptions& options) {
  if (!options.all && (options.dtype.empty() || options.head_dim == 0))
    throw UsageError("compile needs --dtype and --head-dim, or --all");
  // A malformed FLASHRTC_CONFIG is refused as every call and `flashrtc config` refuse it, --all included.
  parse_tile_override(runtime_config().config_override, "FLASHRTC_CONFIG");
  const std::string arch = compile_arch(options.target.arch);
  if (options.all) return compile_all(arch, options.jobs);
  ForwardSpec spec;
  spec.dtype = dtype_from(options.dtype);
  spec.head_dim = options.head_dim;
  spec.mask = mask_from(options.mask);
  // The tile a call of this shape would resolve to on the target of arch; without a length, the one for
  // long sequences, and no tuned entry (they are kept per length).
  ConfigQuery query;
  query.dtype = spec.dtype;
  query.head_dim = spec.head_dim;
  query.mask = spec.mask;
  query.seqlen_q = options.seqlen.value_or(0);
  query.seqlen_kv = options.kv_seqlen.value_or(query.seqlen_q);
  TargetOptions for_arch = options.target;
  for_arch.arch = arch;
  DeviceTarget target = for_arch.target();
  if (!options.seqlen) target.gpu_name.clear();
  ConfigResolution resolution = options.tile.resolve(query, target);
  if (!options.seqlen) resolution.why += "; no length given: --seqlen picks a call's tuned tile";
  spec.tile = resolution.config;
  print_details(spec, resolution, compile_forward(spec, arch));
  return kExitOk;
}

}  // namespace

Command add_compile_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "compile",
      "compile forward specializations into the cache and print their resources (no GPU needed with --arch)");
  auto options = std::make_shared<CompileOptions>();
  CLI::Option* dtype = app->add_option("--dtype", options->dtype, "element type")->check(dtype_validator());
  CLI::Option* head_dim =
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
  CLI::Option* all = app->add_flag(
      "--all", options->all,
      "every dtype (fp32, fp16, bf16) x head dim {32,64,96,128,256} x mask with the default tile "
      "for the arch, plus every tile tuned for the arch (the tuning database)");
  app->add_option("--jobs,-j", options->jobs, "parallel compiles for --all (default: the number of cores)")
      ->check(CLI::Range(1u, 1024u));
  all->excludes(dtype)
      ->excludes(head_dim)
      ->excludes("--gpu-name")
      ->excludes(mask)
      ->excludes(seqlen)
      ->excludes(kv_seqlen);
  for (const char* tile_flag : {"--block-m", "--block-n", "--warps", "--stages"}) all->excludes(tile_flag);
  return {app, [options] { return execute_compile(*options); }};
}

}  // namespace flashrtc::cli

// `flashrtc run`: one forward attention on random inputs, timed launch by launch, optionally checked
// against the Eigen reference.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc_tools/forward_check.hpp"
#include "flashrtc_tools/host_tensors.hpp"
#include "json_output.hpp"

namespace flashrtc::cli {

using namespace flashrtc::tools;

namespace {

struct RunOptions {
  std::int64_t batch = 0, heads = 0, seqlen = 0, head_dim = 0;
  std::optional<std::int64_t> kv_heads, kv_seqlen;
  std::string dtype, mask = "none", layout = tools::to_string(kDefaultLayout);
  int iters = 20, warmup = 3;
  bool check = false, json = false;
  std::uint64_t seed = 1;
  TileOptions tile;
  VariantOptions variants;
};

ForwardParams params_from(const RunOptions& o, Layout layout) {
  ForwardParams p;
  p.dtype = dtype_from(o.dtype);
  p.mask = mask_from(o.mask);
  p.batch = o.batch;
  p.heads_q = o.heads;
  p.heads_kv = o.kv_heads.value_or(o.heads);
  p.seqlen_q = o.seqlen;
  p.seqlen_kv = o.kv_seqlen.value_or(o.seqlen);
  p.head_dim = o.head_dim;
  p.variants = o.variants.variants();
  p.q = p.o = make_tensor_ref(layout, kValidationPlaceholder, p.seqlen_q, p.heads_q, p.head_dim);
  p.k = p.v = make_tensor_ref(layout, kValidationPlaceholder, p.seqlen_kv, p.heads_kv, p.head_dim);
  return p;
}

double median(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::size_t tensor_bytes(const ForwardParams& p, std::int64_t seqlen, std::int64_t heads) {
  return static_cast<std::size_t>(p.batch * seqlen * heads * p.head_dim) * dtype_size(p.dtype);
}

int execute_run(const RunOptions& options) {
  const Layout layout = *parse_layout(options.layout);
  ForwardParams p = params_from(options, layout);
  select_forward_spec(p);  // validates: bad shapes fail here, before any device work
  const ConfigResolution resolution =
      options.tile.resolve(config_query(p), current_device_target().value_or(no_device_target()));
  if (options.tile.any()) p.config = resolution.config;
  const KernelSpec spec = select_forward_spec(p);

  if (!device_available())
    throw Error(ErrorCode::kNoDevice, "no GPU: " + device_unavailable_reason() +
                                          " (`flashrtc compile --arch sm_90a` compiles kernels without one)");
  const DeviceInfo device = current_device();
  const std::string arch =
      runtime_config().arch_override.empty() ? device.arch : runtime_config().arch_override;
  const bool text = !options.json;
  if (text)
    std::printf("gpu:      %s (%s, %d SMs)\n", device.name.c_str(), arch.c_str(), device.multiprocessors);
  if (text)
    std::printf(
        "shape:    batch=%lld heads=%lld kv_heads=%lld seqlen_q=%lld seqlen_kv=%lld head_dim=%lld dtype=%s "
        "mask=%s layout=%s%s\n",
        static_cast<long long>(p.batch), static_cast<long long>(p.heads_q),
        static_cast<long long>(p.heads_kv), static_cast<long long>(p.seqlen_q),
        static_cast<long long>(p.seqlen_kv), static_cast<long long>(p.head_dim),
        std::string(to_string(p.dtype)).c_str(), std::string(to_string(p.mask)).c_str(),
        options.layout.c_str(), variants_suffix(p.variants).c_str());
  if (text)
    std::printf("config:   %s (%s: %s)\n", to_string(spec.tile).c_str(), to_string(resolution.source),
                resolution.why.c_str());
  // Compiling ahead of the first launch keeps NVRTC time out of the launch and shows what was built.
  const CompiledKernelInfo kernel = compile_kernel(spec, arch);
  if (text) std::printf("kernel:   %s\n", kernel.name_expression.c_str());
  if (text)
    std::printf("          %d registers, spill %d/%d bytes%s, %zu bytes dynamic smem, compile %.1f ms (%s)\n",
                kernel.resources.registers, kernel.resources.spill_store_bytes,
                kernel.resources.spill_load_bytes,
                kernel.resources.wgmma_serialized ? ", wgmma serialized" : "",
                family_of(spec).smem_bytes(spec), kernel.compile_ms, to_string(kernel.source));

  DeviceBuffer q(tensor_bytes(p, p.seqlen_q, p.heads_q)), k(tensor_bytes(p, p.seqlen_kv, p.heads_kv)),
      v(tensor_bytes(p, p.seqlen_kv, p.heads_kv)), o(tensor_bytes(p, p.seqlen_q, p.heads_q));
  const std::int64_t lse_count = p.batch * p.heads_q * p.seqlen_q;
  DeviceBuffer lse(options.check ? static_cast<std::size_t>(lse_count) * sizeof(float) : 0);
  p.q = make_tensor_ref(layout, q.data(), p.seqlen_q, p.heads_q, p.head_dim);
  p.k = make_tensor_ref(layout, k.data(), p.seqlen_kv, p.heads_kv, p.head_dim);
  p.v = make_tensor_ref(layout, v.data(), p.seqlen_kv, p.heads_kv, p.head_dim);
  p.o = make_tensor_ref(layout, o.data(), p.seqlen_q, p.heads_q, p.head_dim);
  p.lse = options.check ? static_cast<float*>(lse.data()) : nullptr;

  // One host staging buffer serves q, k, v and the read-back of o in turn; the check keeps only its heads.
  std::optional<ForwardCheck> check;
  if (options.check) check.emplace(p);
  std::vector<unsigned char> staging;
  const std::int64_t q_count = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
  const std::int64_t kv_count = p.batch * p.seqlen_kv * p.heads_kv * p.head_dim;
  fill_random_normal(p.dtype, staging, q_count, options.seed, 0);
  q.copy_from_host(staging.data(), staging.size());
  if (check) check->take_q(staging.data(), p.q);
  fill_random_normal(p.dtype, staging, kv_count, options.seed, 1);
  k.copy_from_host(staging.data(), staging.size());
  if (check) check->take_k(staging.data(), p.k);
  fill_random_normal(p.dtype, staging, kv_count, options.seed, 2);
  v.copy_from_host(staging.data(), staging.size());
  if (check) check->take_v(staging.data(), p.v);
  o.fill_bytes(0xFF);  // NaN in every dtype: an element the kernel never writes stays NaN
  if (options.check) lse.fill_bytes(0xFF);

  Stream stream;
  p.stream = stream.handle();
  // The first launch runs on poisoned outputs; it is the one the check reads.
  const auto first_start = std::chrono::steady_clock::now();
  attention_forward(p);
  stream.synchronize();
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_start).count();
  std::vector<float> lse_host;
  if (check) {
    staging.resize(o.size());
    o.copy_to_host(staging.data(), staging.size());
    lse_host.resize(static_cast<std::size_t>(lse_count));
    lse.copy_to_host(lse_host.data(), lse_host.size() * sizeof(float));
  }

  for (int i = 0; i < options.warmup; ++i) attention_forward(p);
  EventTimer timer;
  std::vector<float> times_ms;
  for (int i = 0; i < options.iters; ++i) {
    timer.start(stream.handle());
    attention_forward(p);
    timer.stop(stream.handle());
    times_ms.push_back(timer.elapsed_ms());
  }
  const double median_ms = median(times_ms);
  const auto [min_ms, max_ms] = std::minmax_element(times_ms.begin(), times_ms.end());
  const double flops = attention_flops(p), tflops = flops / (median_ms * 1e-3) / 1e12;
  if (text) {
    std::printf("time:     median %.4f ms over %d launches (min %.4f, max %.4f; first launch %.1f ms wall)\n",
                median_ms, options.iters, *min_ms, *max_ms, first_ms);
    std::printf("speed:    %.2f TFLOP/s (%.4g FLOP per launch%s)\n", tflops, flops,
                p.variants.window_left != -1 || p.variants.window_right != -1
                    ? ", of the keys the window leaves visible"
                : p.mask == MaskKind::kNone ? ""
                                            : ", halved for the causal mask");
  }

  // Under --json the check's report goes to stderr, its verdict into the document.
  const bool passed = !check || check->verify(staging.data(), p.o, lse_host, text ? stdout : stderr);
  if (options.json) {
    Json call = config_query(p);
    call.update(
        Json{{"batch", p.batch}, {"heads", p.heads_q}, {"kv_heads", p.heads_kv}, {"layout", options.layout}});
    print_json_document(Json{{"gpu", device},
                             {"call", call},
                             {"resolution", resolution},
                             {"specialization", spec},
                             {"kernel", kernel},
                             {"iters", options.iters},
                             {"median_ms", median_ms},
                             {"min_ms", *min_ms},
                             {"max_ms", *max_ms},
                             {"first_launch_ms", first_ms},
                             {"flops", flops},
                             {"tflops", tflops},
                             {"check_passed", check ? Json(passed) : Json(nullptr)}});
  }
  return passed ? kExitOk : kExitCheckFailed;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("run",
                                        "time one forward attention on random inputs; --check compares "
                                        "with the Eigen reference");
  auto options = std::make_shared<RunOptions>();
  app->add_option("--batch", options->batch, "batch size")->required()->check(count_validator());
  app->add_option("--heads", options->heads, "query heads")->required()->check(count_validator());
  app->add_option("--kv-heads", options->kv_heads, "key/value heads, dividing --heads (default: --heads)")
      ->check(count_validator());
  app->add_option("--seqlen", options->seqlen, "query sequence length")->required()->check(count_validator());
  app->add_option("--kv-seqlen", options->kv_seqlen, "key/value sequence length (default: --seqlen)")
      ->check(count_validator());
  app->add_option("--head-dim", options->head_dim, "head dimension")->required()->check(head_dim_validator());
  app->add_option("--dtype", options->dtype, "element type")->required()->check(dtype_validator());
  app->add_option("--mask", options->mask, "mask")->capture_default_str()->check(mask_validator());
  app->add_option("--layout", options->layout, "bnhd = [B,N,H,d], bhnd = [B,H,N,d], contiguous")
      ->capture_default_str()
      ->check(layout_validator());
  add_timing_options(*app, options->warmup, options->iters, "of the call");
  app->add_flag("--check", options->check, "compare o and lse with the double reference (exit 1 on failure)");
  app->add_option("--seed", options->seed, "random seed of q, k, v")->capture_default_str();
  options->tile.add_to(*app);
  options->variants.add_to(*app);
  app->add_flag("--json", options->json,
                "one JSON document: gpu, call, resolution, specialization, kernel, iters, median_ms, min_ms, "
                "max_ms, first_launch_ms, flops, tflops, check_passed (null without --check)");
  return {app, [options] { return execute_run(*options); }};
}

}  // namespace flashrtc::cli

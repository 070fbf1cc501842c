#include "shared_options.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>

#include "cli_support.hpp"
#include "flashrtc/arch.hpp"

namespace flashrtc::cli {

CLI::Validator count_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::int64_t value = 0;
        const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (status != std::errc() || end != text.data() + text.size() || value < 1 || value > kMaxCount)
          return text + ": must be an integer from 1 to " + std::to_string(kMaxCount);
        return {};
      },
      "1.." + std::to_string(kMaxCount));
}

CLI::Option* add_op_option(CLI::App& app, std::string& op, const std::string& bwd_help,
                           const std::string& decode_help, const std::string& varlen_help) {
  if (decode_help.empty())
    return app.add_option("--op", op, "fwd, or bwd: " + bwd_help)
        ->capture_default_str()
        ->check(CLI::IsMember({"fwd", "bwd"}));
  if (varlen_help.empty())
    return app.add_option("--op", op, "fwd; bwd: " + bwd_help + "; or decode: " + decode_help)
        ->capture_default_str()
        ->check(CLI::IsMember({"fwd", "bwd", "decode"}));
  return app
      .add_option("--op", op,
                  "fwd; bwd: " + bwd_help + "; decode: " + decode_help + "; or varlen: " + varlen_help)
      ->capture_default_str()
      ->check(CLI::IsMember({"fwd", "bwd", "decode", "varlen"}));
}

namespace {

// One bound for every command: a count of launches, not of lengths (count_validator).
constexpr int kMaxLaunches = 1000000;

}  // namespace

CLI::Option* add_timing_options(CLI::App& app, int& warmup, int& iters, const std::string& per,
                                const std::string& warmup_note) {
  app.add_option("--warmup", warmup, "untimed launches " + per + " before the timed ones" + warmup_note)
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxLaunches));
  return app.add_option("--iters", iters, "timed launches " + per + "; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxLaunches));
}

void add_deprecated_alias(CLI::App& app, const std::string& old_name, CLI::Option* now_option, int& value) {
  const std::string now_name = now_option->get_name();
  // Converted and checked here: CLI11 leaves a hidden option's name out of its own messages.
  app.add_option_function<std::string>(
         old_name,
         [&value, old_name, now_name, now_option](const std::string& text) {
           int given = 0;
           const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), given);
           if (status != std::errc() || end != text.data() + text.size() || given < 1 || given > kMaxLaunches)
             throw CLI::ValidationError(old_name, text.substr(0, 24) + ": must be an integer from 1 to " +
                                                      std::to_string(kMaxLaunches));
           if (now_option->count() > 0)
             throw CLI::ValidationError(
                 old_name, "the deprecated spelling of " + now_name + ": give " + now_name + " alone");
           std::fprintf(stderr, "flashrtc: warning: %s is deprecated, use %s\n", old_name.c_str(),
                        now_name.c_str());
           value = given;
         },
         "deprecated: " + now_name)
      ->group("");
}

void TileOptions::add_to(CLI::App& app) {
  const char* base =
      " (replaces the field of the resolved tile: explicit > FLASHRTC_CONFIG > tuned > default)";
  app.add_option("--block-m", block_m, std::string("query rows per thread block") + base);
  app.add_option("--block-n", block_n, "key rows per pipeline stage (same base)");
  app.add_option("--warps", warps, "warps per thread block (same base)");
  app.add_option("--stages", stages,
                 "K/V tiles resident in shared memory, as many as the kernel family takes (`tune --dry-run` "
                 "lists its space; same base)");
}

ConfigResolution TileOptions::resolve(ConfigQuery query, const DeviceTarget& target) const {
  const ConfigResolution base = resolve_config(query, target);
  if (!any()) return base;
  return resolve_over(std::move(query), base, target);
}

TileConfig TileOptions::applied_to(TileConfig tile) const {
  if (block_m) tile.block_m = *block_m;
  if (block_n) tile.block_n = *block_n;
  if (warps) tile.warps = *warps;
  if (stages) tile.stages = *stages;
  return tile;
}

ConfigResolution TileOptions::resolve_over(ConfigQuery query, const ConfigResolution& base,
                                           const DeviceTarget& target) const {
  query.explicit_config = applied_to(base.config);
  ConfigResolution r = resolve_config(query, target);
  r.why = "the fields given on the command line over the " + std::string(to_string(base.source)) + " tile " +
          to_string(base.config) + " (" + base.why + ")";
  return r;
}

namespace {

// The two bounds of --window's text "LEFT,RIGHT", each -1 or a count; nullopt when the text is not that.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_window(const std::string& text) {
  const std::size_t comma = text.find(',');
  if (comma == std::string::npos || text.find(',', comma + 1) != std::string::npos) return std::nullopt;
  const auto bound = [](const std::string& part) -> std::optional<std::int64_t> {
    if (part == "-1") return -1;
    if (part.empty() || part.size() > 10 || part.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    const std::int64_t value = std::stoll(part);
    return value <= kMaxCount ? std::optional<std::int64_t>(value) : std::nullopt;
  };
  const std::optional<std::int64_t> left = bound(text.substr(0, comma)), right = bound(text.substr(comma + 1));
  if (!left || !right) return std::nullopt;
  return std::make_pair(*left, *right);
}

}  // namespace

void VariantOptions::add_to(CLI::App& app) {
  app.add_option("--window", window,
                 "sliding window LEFT,RIGHT: keys visible each side of the aligned diagonal, -1 unbounded "
                 "(docs/variants.md)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return parse_window(text) ? std::string()
                                      : "'" + text.substr(0, 24) +
                                            "': expected LEFT,RIGHT, each -1 or an integer up to 2147483647";
          },
          "LEFT,RIGHT"));
  app.add_option("--softcap", softcap, "cap the scores at softcap * tanh(s / softcap) (0: off)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            float value = 0.f;
            const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
            if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < 0.f)
              return "'" + text.substr(0, 24) + "': expected a finite number >= 0";
            return {};
          },
          "X >= 0"));
}

AttentionVariants VariantOptions::variants() const {
  AttentionVariants v;
  if (window) std::tie(v.window_left, v.window_right) = *parse_window(*window);
  v.softcap = softcap;
  return v;
}

std::string variants_suffix(const AttentionVariants& v) {
  std::string text;
  if (v.window_left != -1 || v.window_right != -1)
    text += " window=(" + std::to_string(v.window_left) + "," + std::to_string(v.window_right) + ")";
  if (v.softcap != 0.f) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, " softcap=%g", static_cast<double>(v.softcap));
    text += buffer;
  }
  return text;
}

void VariantOptions::refuse_for(const std::string& what) const {
  if (any()) throw UsageError("--window and --softcap go with the forward: " + what + " takes no variants");
}

namespace {

// Empty when arch is one NVRTC can target for flashrtc; else what is wrong, naming the accepted ones.
std::string arch_problem(const std::string& arch) {
  if (is_supported_arch(arch)) return {};
  const std::string shown = arch.size() > 24 ? arch.substr(0, 24) + "..." : arch;
  return "'" + shown + "': must be one of " + supported_archs_text();
}

// FLASHRTC_ARCH enters as an arch too, and is refused as --arch is.
void check_arch_override() {
  const std::string& arch = runtime_config().arch_override;
  if (!arch.empty() && !arch_problem(arch).empty()) throw UsageError("FLASHRTC_ARCH=" + arch_problem(arch));
}

}  // namespace

void TargetOptions::add_to(CLI::App& app, const std::string& arch_help) {
  CLI::Option* arch_option =
      app.add_option("--arch", arch, arch_help)
          ->check(CLI::Validator([](std::string& name) -> std::string { return arch_problem(name); },
                                 "sm_" + std::to_string(kMinArchCc) + "..sm_" + std::to_string(kMaxArchCc)));
  app.add_option(
         "--gpu-name", gpu_name,
         "resolve for this GPU (as `flashrtc info` names it, with --arch) instead of the one in hand: its "
         "tuned entries apply")
      ->needs(arch_option);
}

DeviceTarget TargetOptions::target(std::string* described) const {
  check_arch_override();
  const auto say = [&](const std::string& text) {
    if (described) *described = text;
  };
  if (!gpu_name.empty()) {
    const DeviceTarget t = assumed_device_target(gpu_name, arch);
    say(gpu_name + " (" + arch + ", assumed " + format_bytes(double(t.smem_limit_bytes)) +
        " shared memory per block; named on the command line)");
    return t;
  }
  const std::optional<DeviceTarget> in_hand = current_device_target();
  if (in_hand && (arch.empty() || in_hand->arch == arch)) {
    say(in_hand->gpu_name + " (" + in_hand->arch + ", " + format_bytes(double(in_hand->smem_limit_bytes)) +
        " shared memory per block)");
    return *in_hand;
  }
  if (!arch.empty()) {
    const DeviceTarget t = assumed_device_target("", arch);
    say("a GPU of " + arch + " (assumed " + format_bytes(double(t.smem_limit_bytes)) +
        " shared memory per block; no tuned entry applies without --gpu-name)");
    return t;
  }
  say("none (" + device_unavailable_reason() + "); resolved for sm_80's " +
      format_bytes(double(kSmemBytesSm80)) +
      " of shared memory, and no tuned entry can apply without a GPU name (--gpu-name and --arch name one)");
  return no_device_target();
}

void TargetOptions::require_device(const std::string& device_name, const std::string& device_arch) const {
  if (!arch.empty() && arch != device_arch)
    throw UsageError("--arch " + arch + ": this command runs on the GPU in hand (" + device_arch +
                     "); --arch chooses the target of --dry-run only");
  if (!gpu_name.empty() && gpu_name != device_name)
    throw UsageError("--gpu-name " + gpu_name + ": this command runs on the GPU in hand (" + device_name +
                     "); --gpu-name chooses the target of --dry-run only");
}

void check_environment() {
  const RuntimeConfig& config = runtime_config();  // throws for a flag or log level it does not know
  parse_tile_override(config.config_override, "FLASHRTC_CONFIG");
  check_arch_override();
}

std::string compile_arch(const std::string& requested) {
  if (!requested.empty()) return requested;
  check_arch_override();
  if (!runtime_config().arch_override.empty()) return runtime_config().arch_override;
  if (!device_available())
    throw Error(ErrorCode::kNoDevice, "no GPU to take the arch from (" + device_unavailable_reason() +
                                          "); pass --arch, e.g. --arch sm_90a, to compile without one");
  return current_device().arch;
}

}  // namespace flashrtc::cli

#pragma once
// Options that mean the same in every subcommand that takes them: the tile fields, the target GPU
// (--arch, --gpu-name) and lengths and counts.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "flashrtc/flashrtc.hpp"

namespace flashrtc::cli {

/// The most a length or count may be: the kernels index rows and heads with 32-bit integers (the runtime's
/// argument checks use the same bound).
inline constexpr std::int64_t kMaxCount = 2147483647;

/// "--seqlen 0: must be an integer from 1 to 2147483647": checks the text before it is converted, so no
/// value, however long, can overflow or reach a loop over lengths.
CLI::Validator count_validator();

/// --op in compile, config, bench and tune: fwd (the default) or bwd, the kernels of the call's backward,
/// where decode_help is given, decode (attention_with_kvcache), and where varlen_help is given too, varlen
/// (attention_varlen_forward). The helps say what each does in that command.
CLI::Option* add_op_option(CLI::App& app, std::string& op, const std::string& bwd_help,
                           const std::string& decode_help = "", const std::string& varlen_help = "");

/// --warmup and --iters in run, bench and tune: untimed launches, then the timed ones whose median is
/// reported, counted `per` ("per point"); warmup_note follows --warmup's help. Returns --iters.
CLI::Option* add_timing_options(CLI::App& app, int& warmup, int& iters, const std::string& per,
                                const std::string& warmup_note = "");

/// old_name as a deprecated spelling of the integer option now_option: it still sets value, and warns once on
/// stderr naming the new spelling. Not listed in --help.
void add_deprecated_alias(CLI::App& app, const std::string& old_name, CLI::Option* now_option, int& value);

/// --block-m/--block-n/--warps/--stages in run, bench, compile, config and tune: the fields given replace
/// those of the tile the call resolves to (explicit > FLASHRTC_CONFIG > tuned > default), never those of
/// another base.
struct TileOptions {
  std::optional<int> block_m, block_n, warps, stages;
  void add_to(CLI::App& app);
  bool any() const { return block_m || block_n || warps || stages; }
  /// query's tile on target with the given fields replaced; without any, the resolution itself. Throws
  /// Error as resolve_config does: a malformed FLASHRTC_CONFIG or a tile the family cannot build is
  /// kInvalidArgument, one that exceeds target's shared memory kUnsupported.
  ConfigResolution resolve(ConfigQuery query, const DeviceTarget& target) const;
  /// base with the given fields replaced.
  TileConfig applied_to(TileConfig base) const;
  /// resolve with base as the resolution the fields go over (one of another query, when the fields decide
  /// which kernel runs: the backward's main kernel).
  ConfigResolution resolve_over(ConfigQuery query, const ConfigResolution& base,
                                const DeviceTarget& target) const;
};

/// --window and --softcap in run, compile and config (the forward's): the call's attention variants
/// (docs/variants.md). --window LEFT,RIGHT: keys each side of the aligned diagonal, -1 unbounded (checked as
/// integers from -1 to 2147483647 before conversion); --softcap X > 0 (0: off; checked by the library).
struct VariantOptions {
  std::optional<std::string> window;
  float softcap = 0.f;
  void add_to(CLI::App& app);
  bool any() const { return window.has_value() || softcap != 0.f; }
  AttentionVariants variants() const;
  /// A usage error naming the options when any is given to an operation that takes none (`what`).
  void refuse_for(const std::string& what) const;
};

/// " window=(L,R)" and " softcap=X" for the variants a call has, "" without: what run and config print after
/// the call's shape.
std::string variants_suffix(const AttentionVariants& v);

/// --arch and --gpu-name in config, compile, bench --dry-run and tune --dry-run: the device a tile is
/// resolved (and kernels compiled) for when it is not the GPU in hand.
struct TargetOptions {
  std::string arch, gpu_name;
  /// Adds both; --arch is checked against the archs NVRTC can target (usage error naming them), and
  /// --gpu-name needs --arch (a name alone gives no limits).
  void add_to(CLI::App& app, const std::string& arch_help);
  bool any() const { return !arch.empty() || !gpu_name.empty(); }
  /// --gpu-name with --arch: that GPU, shared memory assumed from the arch (its tuned entries apply).
  /// --arch alone: the GPU in hand when it has that arch, else the arch's limits without a name (no tuned
  /// entry applies). Neither: the GPU in hand, else no_device_target(). described (when given) says which.
  DeviceTarget target(std::string* described = nullptr) const;
  /// For a command that runs on the GPU in hand (bench and tune without --dry-run): a usage error when
  /// --arch or --gpu-name name another device.
  void require_device(const std::string& device_name, const std::string& device_arch) const;
};

/// The environment's settings as every command takes them, before it does anything: a flag or log level
/// runtime_config() does not know, a malformed FLASHRTC_CONFIG or an FLASHRTC_ARCH NVRTC cannot target is
/// an error naming the variable (kInvalidArgument, or UsageError for the arch; exit 2 either way).
void check_environment();

/// The arch to compile for: --arch, else FLASHRTC_ARCH, else the GPU's (attention_forward's order).
/// Throws Error(kNoDevice) when none of them is there.
std::string compile_arch(const std::string& requested);

}  // namespace flashrtc::cli

#pragma once
// What the subcommands share: exit codes, usage errors, option parsing of flashrtc's vocabulary types.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "flashrtc/flashrtc.hpp"
#include "flashrtc_tools/format.hpp"
#include "flashrtc_tools/tool_errors.hpp"

namespace flashrtc::cli {

/// The command's contract with scripts (README): distinct codes so `make run` can tell a failed check
/// from a missing GPU.
enum ExitCode : int { kExitOk = 0, kExitCheckFailed = 1, kExitUsage = 2, kExitDevice = 3 };

/// A value the command or a tool rejects (CLI11 and the runtime reject the rest): exits kExitUsage.
/// A program flashrtc runs but does not ship (cuobjdump, gnuplot) is missing: exits kExitDevice.
using tools::format_bytes;
using tools::format_time;
using tools::kernel_family_name;
using tools::MissingTool;
using tools::UsageError;

/// A subcommand as main() sees it: its parser and what to do once it parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> execute;
};

Command add_info_command(CLI::App& parent);
Command add_compile_command(CLI::App& parent);
Command add_run_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_config_command(CLI::App& parent);
Command add_tune_command(CLI::App& parent);
Command add_cache_command(CLI::App& parent);

/// Validators naming the accepted spellings, so a typo fails at parse time with exit 2.
CLI::Validator dtype_validator();
CLI::Validator mask_validator();
CLI::Validator head_dim_validator();
CLI::Validator layout_validator();  // bnhd | bhnd

DType dtype_from(const std::string& name);
MaskKind mask_from(const std::string& name);

/// --block-m/--block-n/--warps/--stages: any subset overrides the default tile field by field.
struct TileOptions {
  std::optional<int> block_m, block_n, warps, stages;
  void add_to(CLI::App& app);
  bool any() const { return block_m || block_n || warps || stages; }
  TileConfig apply(TileConfig base) const;
};

/// kExitUsage for a caller's mistake (bad value, unsupported tile), kExitDevice for everything the machine
/// caused (no GPU, driver, NVRTC, cache I/O).
int exit_code_for(const Error& error);

/// The arch to compile for: requested, else FLASHRTC_ARCH, else the GPU's (attention_forward's order).
/// Throws Error(kNoDevice) when none of them is there.
std::string compile_arch(const std::string& requested);

}  // namespace flashrtc::cli

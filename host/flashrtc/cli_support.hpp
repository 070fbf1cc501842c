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
#include "shared_options.hpp"

namespace flashrtc::cli {

/// The command's contract with scripts (docs/cli.md): distinct codes so `make run` can tell a failed check
/// from a missing GPU.
enum ExitCode : int { kExitOk = 0, kExitCheckFailed = 1, kExitUsage = 2, kExitDevice = 3 };
/// The codes above as `flashrtc --help` lists them.
inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok; 1 a check failed (run --check, tune: no candidate passed, cache verify: bad entries "
    "removed); 2 bad usage or argument; 3 no GPU, a CUDA, NVRTC or cache I/O failure, or a missing external "
    "tool (cuobjdump or nvdisasm for cache sass; a missing plotter is no failure: --plot then leaves the "
    "script and data).\n"
    "--json, a flag of info, config, compile, run, bench, cache ls and cache show: data as JSON on stdout, "
    "one document or JSON lines as each command's --help says; a failure (a usage error too) then also "
    "prints {\"error\": {\"kind\", \"message\", \"exit_code\"}} there.";
/// A value the command or a tool rejects (CLI11 and the runtime reject the rest): exits kExitUsage.
/// A program flashrtc runs but does not ship (cuobjdump) is missing: exits kExitDevice.
using tools::format_bytes;
using tools::format_time;
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

/// What run, bench and tune put in a call's tensor pointers to validate its shape before any device exists
/// (non-null, 16-byte aligned, as device pointers are), so that a bad shape is a usage error (exit 2) on a
/// machine without a GPU too. Never dereferenced.
alignas(16) inline const unsigned char kValidationPlaceholder[16] = {};

/// kExitUsage for a caller's mistake (bad value, unsupported tile), kExitDevice for everything the machine
/// caused (no GPU, driver, NVRTC, cache I/O).
int exit_code_for(const Error& error);

}  // namespace flashrtc::cli

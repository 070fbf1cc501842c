// The `flashrtc` command. Every failure ends here as one "flashrtc: error: ..." line and an exit code
// (cli_support.hpp); nothing escapes as an uncaught exception.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "flashrtc/c_api.h"
#include "json_output.hpp"

namespace {

// Set once the command line parsed with a --json flag: a failure is then a JSON document on stdout too, so
// a script reading stdout sees why there is no data.
bool g_json_errors = false;

int report(const char* what, int code, const char* kind) {
  std::fprintf(stderr, "flashrtc: error: %s\n", what);
  if (g_json_errors) flashrtc::cli::print_json_line(flashrtc::cli::error_json(kind, what, code));
  return code;
}

// --json is a flag in every command that takes it: the innermost command given (`cache show` rather than
// `cache`) has it set.
bool json_flag_given(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) return json_flag_given(*sub);
  const CLI::Option* json = app.get_option_no_throw("--json");
  return json && json->count() > 0;
}

// A command line CLI11 refused still asked for JSON when it holds --json before any `--`: its usage error is
// then a JSON document too.
bool json_flag_typed(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--json") return true;
  }
  return false;
}

int run_main(int argc, char** argv) {
  using namespace flashrtc::cli;
  CLI::App app{"flashrtc: FlashAttention kernels compiled at run time with NVRTC", "flashrtc"};
  app.require_subcommand(1);
  app.footer(kExitCodesHelp);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  app.set_version_flag("--version", flashrtc_version());
  const std::vector<Command> commands = {
      add_info_command(app),   add_compile_command(app), add_run_command(app),  add_bench_command(app),
      add_config_command(app), add_tune_command(app),    add_cache_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    g_json_errors = json_flag_typed(argc, argv);
    // CLI11 reports a mistyped command as a missing one; name what was typed instead.
    const bool unknown_command = app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-';
    const std::string message = unknown_command ? "unknown command '" + std::string(argv[1]) +
                                                      "' (info, compile, run, bench, config, tune, cache)"
                                                : std::string(e.what());
    report(message.c_str(), kExitUsage, "usage");
    std::fprintf(stderr, "Run with --help for more information.\n");
    return kExitUsage;
  }
  g_json_errors = json_flag_given(app);
  check_environment();
  for (const Command& command : commands)
    if (command.app->parsed()) return command.execute();
  return report("no subcommand given", kExitUsage, "usage");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flashrtc::cli;
  // Line by line even into a pipe (`| tee`), so progress shows during long compiles and checks.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return run_main(argc, argv);
  } catch (const UsageError& e) {
    return report(e.what(), kExitUsage, "usage");
  } catch (const MissingTool& e) {
    return report(e.what(), kExitDevice, "missing tool");
  } catch (const flashrtc::Error& e) {
    std::fprintf(stderr, "flashrtc: error: %s: %s", flashrtc::to_string(e.code()), e.message().c_str());
    if (!e.call().empty())
      std::fprintf(stderr, " [%s%s%s]", e.call().c_str(), e.status().empty() ? "" : " -> ",
                   e.status().c_str());
    std::fprintf(stderr, "\n");
    // A compile error is only actionable with NVRTC's log; it follows the one-line summary.
    if (!e.log().empty()) std::fprintf(stderr, "%s\n", e.log().c_str());
    if (g_json_errors)
      print_json_line(error_json(flashrtc::to_string(e.code()), e.message(), exit_code_for(e)));
    return exit_code_for(e);
  } catch (const CLI::Error& e) {
    return report(e.what(), kExitUsage, "usage");
  } catch (const std::exception& e) {
    return report(e.what(), kExitDevice, "internal");
  } catch (...) {
    return report("unknown exception", kExitDevice, "internal");
  }
}

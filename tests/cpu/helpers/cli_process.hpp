#pragma once
// The `flashrtc` command run as a user runs it, for the cpu suites that test it as a process: a separate
// process each, configured by its environment (only the FLASHRTC_ variables given), with its own cache and
// tuning database. Needs FLASHRTC_CLI, the command's path (tests/CMakeLists.txt defines it).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cpu/helpers/file_permissions.hpp"
#include "cpu/helpers/tuning_test_util.hpp"
#include "flashrtc/config.hpp"

namespace flashrtc::test::cli {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

// A root without CAP_SETUID (some containers) cannot become nobody: the child exits with this.
inline constexpr int kCannotDropRoot = 125;

// In a forked child: becomes `flashrtc args...` with only the FLASHRTC_ variables given (others unset).
[[noreturn]] inline void exec_flashrtc(const std::vector<std::string>& args,
                                       const std::map<std::string, std::string>& env) {
  for (const char* name : kEnvironmentVariables) ::unsetenv(name);
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> argv{const_cast<char*>(FLASHRTC_CLI)};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execv(FLASHRTC_CLI, argv.data());
  ::_exit(127);
}

// Runs `flashrtc args...` with only the FLASHRTC_ variables given (others unset), stdout and stderr kept.
// as_nobody: root runs it as nobody (uid 65534), for whom permissions hold.
inline Result flashrtc_cli(const std::filesystem::path& work, const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env, bool as_nobody = false) {
  static int counter = 0;
  const std::filesystem::path out = work / ("cli-" + std::to_string(counter) + ".out");
  const std::filesystem::path err = work / ("cli-" + std::to_string(counter++) + ".err");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0) ::_exit(126);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    if (as_nobody && ::geteuid() == 0 && (::setgid(test::kNobodyId) != 0 || ::setuid(test::kNobodyId) != 0))
      ::_exit(kCannotDropRoot);
    exec_flashrtc(args, env);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = test::read_text(out);
  r.err = test::read_text(err);
  return r;
}

// One sandbox per test: the child's cache and tuning database, and the same ones for this process.
struct Sandbox {
  explicit Sandbox(const std::string& tag) : tuning(tag) {}
  test::TuningSandbox tuning;
  std::map<std::string, std::string> env() const {
    return {{"FLASHRTC_CACHE_DIR", (tuning.dir() / "cache").string()},
            {"FLASHRTC_TUNE_DB", tuning.db().string()}};
  }
  Result run(const std::vector<std::string>& args, std::map<std::string, std::string> extra = {},
             bool as_nobody = false) const {
    std::map<std::string, std::string> all = env();
    for (auto& [name, value] : extra) all[name] = value;
    Result r = flashrtc_cli(tuning.dir(), args, all, as_nobody);
    INFO("flashrtc exit " << r.exit_code << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    return r;
  }
};

inline std::string line_of(const std::string& text, const std::string& prefix) {
  const auto at = text.find("\n" + prefix);
  const auto start = text.rfind(prefix, 0) == 0 ? 0 : at == std::string::npos ? std::string::npos : at + 1;
  if (start == std::string::npos) return {};
  return text.substr(start, text.find('\n', start) - start);
}

}  // namespace flashrtc::test::cli

#include "flashrtc_tools/external_tool.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

extern char** environ;

namespace flashrtc::tools {

namespace {

void add_absolute(std::vector<std::string>& dirs, const std::string& dir) {
  if (!dir.empty() && dir.front() == '/') dirs.push_back(dir);
}

}  // namespace

std::string pip_tools_dir() {
  return FLASHRTC_TOOLS_DIR;
}

// Where NVIDIA's wheels for CUDA 13 put their programs.
std::string pip_tools_bin_dir() {
  return pip_tools_dir() + "/nvidia/cu13/bin";
}

std::vector<std::string> tool_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::istringstream parts(path);
    for (std::string dir; std::getline(parts, dir, ':');) add_absolute(dirs, dir);
  }
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(variable)) add_absolute(dirs, std::string(root) + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  add_absolute(dirs, pip_tools_bin_dir());
  return dirs;
}

std::optional<std::string> find_tool(const std::string& name, const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

int run_tool(const std::string& path, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawn(&pid, path.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace flashrtc::tools

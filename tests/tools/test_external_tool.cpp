// Where the tools find the programs they run (cuobjdump, nvdisasm): PATH's absolute entries, the CUDA
// toolkit, then the directory `make deps` installs NVIDIA's wheels into; never a relative PATH entry (the
// working directory, which may be a cache or a download). Without them, `cache sass` says how to get them.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "flashrtc_tools/cache_inspect.hpp"
#include "flashrtc_tools/external_tool.hpp"
#include "flashrtc_tools/tool_errors.hpp"

namespace fs = std::filesystem;
using namespace flashrtc;

namespace {

// A scratch directory holding bin/fake-tool (executable), removed with the environment it changed.
struct Scratch {
  fs::path root = fs::temp_directory_path() / ("flashrtc-external-tool-" + std::to_string(::getpid()));
  std::optional<std::string> path, cuda_home, cuda_path;
  fs::path cwd = fs::current_path();
  Scratch() {
    fs::create_directories(root / "bin");
    std::ofstream(root / "bin" / "fake-tool") << "#!/bin/sh\nexit 0\n";
    fs::permissions(root / "bin" / "fake-tool", fs::perms::owner_all);
    for (auto [name, saved] :
         {std::pair{"PATH", &path}, {"CUDA_HOME", &cuda_home}, {"CUDA_PATH", &cuda_path}})
      if (const char* value = std::getenv(name)) *saved = value;
    ::unsetenv("CUDA_HOME");
    ::unsetenv("CUDA_PATH");
  }
  ~Scratch() {
    fs::current_path(cwd);
    for (auto [name, saved] :
         {std::pair{"PATH", &path}, {"CUDA_HOME", &cuda_home}, {"CUDA_PATH", &cuda_path}})
      saved->has_value() ? ::setenv(name, (*saved)->c_str(), 1) : ::unsetenv(name);
    fs::remove_all(root);
  }
};

}  // namespace

TEST_CASE(
    "find_tool: PATH's absolute entries, the toolkit, then the wheels' bin directory; no relative entry") {
  Scratch s;
  ::setenv("PATH", (s.root / "bin").c_str(), 1);
  CHECK(tools::find_tool("fake-tool") == (s.root / "bin" / "fake-tool").string());
  CHECK_FALSE(tools::find_tool("no-such-tool-anywhere"));

  // From inside the scratch directory, "bin" and "." name it: such entries are skipped.
  fs::current_path(s.root);
  ::setenv("PATH", "bin:.:", 1);
  CHECK_FALSE(tools::find_tool("fake-tool"));
  ::setenv("CUDA_HOME", ".", 1);
  CHECK_FALSE(tools::find_tool("fake-tool"));
  ::setenv("CUDA_HOME", s.root.c_str(), 1);
  CHECK(tools::find_tool("fake-tool") == (s.root / "bin" / "fake-tool").string());

  ::setenv("PATH", "/usr/bin", 1);
  ::unsetenv("CUDA_HOME");
  const std::vector<std::string> dirs = tools::tool_search_dirs();
  REQUIRE(dirs.size() == 3);
  CHECK(dirs[0] == "/usr/bin");
  CHECK(dirs[1] == "/usr/local/cuda/bin");
  CHECK(dirs[2] == tools::pip_tools_bin_dir());
  CHECK(tools::pip_tools_bin_dir() == tools::pip_tools_dir() + "/nvidia/cu13/bin");
  CHECK(fs::path(tools::pip_tools_dir()).is_absolute());
}

TEST_CASE("cache sass without cuobjdump or nvdisasm: MissingTool says how to get them and names the cubin") {
  Scratch s;
  CacheEntry entry;
  entry.cubin_path = s.root / "kernel.cubin";
  try {
    tools::print_entry_sass(entry, {(s.root / "empty").string()});
    FAIL("print_entry_sass ran a tool from an empty search path");
  } catch (const tools::MissingTool& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("`make deps`") != std::string::npos);
    CHECK(message.find("`pip install --target " + tools::pip_tools_dir() +
                       " nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`") != std::string::npos);
    CHECK(message.find(tools::pip_tools_bin_dir()) != std::string::npos);
    CHECK(message.find(entry.cubin_path.string()) != std::string::npos);
  }
}

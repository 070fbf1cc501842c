#pragma once
// Running the toolkit's and the system's programs (cuobjdump, nvdisasm, gnuplot, python3) that flashrtc does
// not link: found on PATH, in the CUDA toolkit's bin directory, or where `make deps` installs NVIDIA's PyPI
// wheels of the toolkit's binary utilities; run without a shell.
#include <optional>
#include <string>
#include <vector>

namespace flashrtc::tools {

/// The directory `make deps` installs NVIDIA's cuobjdump and nvdisasm wheels into (`pip install --target`;
/// the build's FLASHRTC_TOOLS_DIR, by default the checkout's .deps/tools).
std::string pip_tools_dir();
/// The wheels' bin directory under pip_tools_dir(), where cuobjdump and nvdisasm land.
std::string pip_tools_bin_dir();

/// Where find_tool looks, in order: the absolute entries of PATH, $CUDA_HOME/bin, $CUDA_PATH/bin,
/// /usr/local/cuda/bin, then pip_tools_bin_dir(). Relative entries are skipped,
/// so nothing is run from the working directory.
std::vector<std::string> tool_search_dirs();

/// The first executable `name` in dirs.
std::optional<std::string> find_tool(const std::string& name,
                                     const std::vector<std::string>& dirs = tool_search_dirs());

/// Runs path with args, stdout and stderr inherited, and waits. The exit status, or -1 when it could not
/// start or was killed.
int run_tool(const std::string& path, const std::vector<std::string>& args);

}  // namespace flashrtc::tools

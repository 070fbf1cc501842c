#pragma once
// Running the toolkit's and the system's programs (cuobjdump, nvdisasm, gnuplot, python3) that flashrtc does
// not link: found on PATH or in the CUDA toolkit's bin directory, run without a shell.
#include <optional>
#include <string>
#include <vector>

namespace flashrtc::tools {

/// The first executable `name` on PATH, then in $CUDA_HOME/bin, $CUDA_PATH/bin and /usr/local/cuda/bin.
std::optional<std::string> find_tool(const std::string& name);

/// Runs path with args, stdout and stderr inherited, and waits. The exit status, or -1 when it could not
/// start or was killed.
int run_tool(const std::string& path, const std::vector<std::string>& args);

}  // namespace flashrtc::tools

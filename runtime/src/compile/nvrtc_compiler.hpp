#pragma once
// NVRTC: one program, one name expression, cubin + PTX + log out. Knows nothing about attention.
#include <string>
#include <utility>
#include <vector>

namespace flashrtc::detail {

struct NvrtcInput {
  std::string program_name;                                  // e.g. "flashrtc_forward.cu"
  std::string source;                                        // the main translation unit
  std::vector<std::pair<std::string, std::string>> headers;  // include name -> content
  std::string name_expression;
  std::vector<std::string> options;
};

struct NvrtcOutput {
  std::string cubin;  // bytes
  std::string ptx;
  std::string log;  // the compile log, with ptxas's -v report
  std::string lowered_name;
  double compile_ms = 0;
};

// Throws Error(kNvrtc) with the log, the options and `key` when NVRTC fails.
NvrtcOutput nvrtc_compile(const NvrtcInput& input, const std::string& key);

// "13.0".
std::string nvrtc_version_string();

// The NVRTC build in this process, e.g. "13.0 V13.0.88 CL-36424714": the release, the toolkit build and the
// compiler build ID from the header of the PTX it emits (a patch release changes them, not "13.0").
// Computed once per process (one tiny compile, some tens of milliseconds); never throws: when NVRTC names
// no build, "13.0 build unknown" plus the library file's size, which a new build changes as well.
const std::string& nvrtc_build_identity();

// Options joined with spaces, for logs, errors and cache metadata.
std::string join_options(const std::vector<std::string>& options);

}  // namespace flashrtc::detail

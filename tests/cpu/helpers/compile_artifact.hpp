#pragma once
// What get_artifact would produce for a request, compiled here so that the memory cache never sees the key:
// for tests that write, corrupt or inspect entries themselves.
#include <string>

#include "kernel_artifact.hpp"
#include "nvrtc_compiler.hpp"
#include "ptxas_report.hpp"

namespace flashrtc::test {

inline detail::KernelArtifact compile_artifact(const detail::CompileRequest& request) {
  const std::string key = request.inputs.key();
  detail::NvrtcOutput out = detail::nvrtc_compile(request.nvrtc, key);
  detail::KernelArtifact artifact;
  artifact.key = key;
  artifact.inputs = request.inputs;
  artifact.lowered_name = out.lowered_name;
  artifact.resources = detail::parse_ptxas_report(out.log, out.lowered_name);
  artifact.cubin = out.cubin;
  artifact.ptx = out.ptx;
  artifact.log = out.log;
  artifact.compile_ms = out.compile_ms;
  artifact.description = request.description;
  return artifact;
}

}  // namespace flashrtc::test

#pragma once
// What get_artifact would produce for a request, compiled here so that the memory cache never sees the key:
// for tests that write, corrupt or inspect entries themselves.
#include <string>

#include "compile/kernel_artifact.hpp"
#include "compile/nvrtc_compiler.hpp"

namespace flashrtc::test {

inline detail::KernelArtifact compile_artifact(const detail::CompileRequest& request) {
  const std::string key = request.inputs.key();
  return detail::artifact_from_compile(request, key, detail::nvrtc_compile(request.nvrtc, key));
}

}  // namespace flashrtc::test

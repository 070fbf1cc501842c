#pragma once
// The attention layer's side of compiling: what NVRTC is asked to build for a ForwardSpec.
#include <string>

#include "flashrtc/kernel.hpp"
#include "kernel_artifact.hpp"

namespace flashrtc::detail {

// The request for spec on arch ("sm_90a"). Throws Error(kInvalidArgument) for an invalid spec or arch.
CompileRequest forward_compile_request(const ForwardSpec& spec, const std::string& arch);

// Threads per block of spec's kernel.
int forward_block_threads(const ForwardSpec& spec);

}  // namespace flashrtc::detail

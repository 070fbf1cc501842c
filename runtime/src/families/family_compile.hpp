#pragma once
// What NVRTC is asked to build for one kernel of a family: the program, the name expression, the options, the
// cache key's inputs and meta.json's kernel fields, all derived from the family's template-argument list.
#include <string>

#include "compile/kernel_artifact.hpp"
#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

// The request for spec (spec.family set) on arch ("sm_90a"). Throws Error(kInvalidArgument) for an arch that
// is not of the form sm_XY or older than sm_80, or a spec the family cannot build.
// Throws Error(kInvalidArgument) unless is_supported_arch(arch) (flashrtc/arch.hpp).
void check_arch(const std::string& arch);

CompileRequest family_compile_request(const KernelSpec& spec, const std::string& arch);

}  // namespace flashrtc::detail

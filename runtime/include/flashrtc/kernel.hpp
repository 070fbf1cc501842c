#pragma once
/// Compiling kernel specializations of any family, for tools that warm or inspect the cache without a GPU.
#include <string>

#include "flashrtc/compiled_kernel.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/kernel_family.hpp"

namespace flashrtc {

/// The NVRTC name expression of spec's kernel (the portable forward family's when spec.family is null), e.g.
/// "flashrtc::attention_forward_simt<float, 64, 64, 64, 4, 2, flashrtc::kernel::Mask::kNone>".
FLASHRTC_API std::string kernel_name_expression(const KernelSpec& spec);

/// Compiles (or finds in the cache) spec's kernel for arch ("sm_80", "sm_90a", ...): spec.family's, or when
/// it is null the best forward family for spec's dtype and head dim on arch that can build spec.tile (as for
/// a call with that tile). Needs no GPU. Throws Error: kInvalidArgument for a bad spec or arch, kNvrtc on
/// compile failure, kCompileDisallowed under FLASHRTC_REQUIRE_CACHED.
FLASHRTC_API CompiledKernelInfo compile_kernel(const KernelSpec& spec, const std::string& arch);

/// Deprecated names, kept for one release: they serve every family, not the forward alone.
using ForwardSpec [[deprecated("renamed KernelSpec")]] = KernelSpec;
[[deprecated("renamed kernel_name_expression")]] inline std::string forward_name_expression(const KernelSpec& spec) {
  return kernel_name_expression(spec);
}
[[deprecated("renamed compile_kernel")]] inline CompiledKernelInfo compile_forward(const KernelSpec& spec,
                                                                                 const std::string& arch) {
  return compile_kernel(spec, arch);
}

}  // namespace flashrtc

#pragma once
/// Compiling kernel specializations, for tools that warm or inspect the cache without a GPU.
#include <string>

#include "flashrtc/compiled_kernel.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/types.hpp"

namespace flashrtc {

/// Everything that selects one forward kernel instantiation (its family, dtype, head dim, mask and tile).
using ForwardSpec = KernelSpec;

/// The NVRTC name expression of spec's kernel (the portable family's when spec.family is null), e.g.
/// "flashrtc::attention_forward_simt<float, 64, 64, 64, 4, 2, flashrtc::kernel::Mask::kNone>".
FLASHRTC_API std::string forward_name_expression(const ForwardSpec& spec);

/// Compiles (or finds in the cache) the forward kernel for spec and arch ("sm_80", "sm_90a", ...): spec.family's,
/// or when it is null the best family for spec's dtype and head dim on arch that can build spec.tile (as for
/// a call with that tile). Needs no GPU. Throws Error: kInvalidArgument for a bad spec or arch, kNvrtc on compile failure,
/// kCompileDisallowed under FLASHRTC_REQUIRE_CACHED.
FLASHRTC_API CompiledKernelInfo compile_forward(const ForwardSpec& spec, const std::string& arch);

}  // namespace flashrtc

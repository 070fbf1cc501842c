#pragma once
// The launch of the forward families that share kernel::ForwardParams (forward_params.cuh) and
// ForwardBlock's grid (forward_block.cuh): one thread block per (batch, head, query block).
#include <vector>

#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

// The template parameters of those kernels: <T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMask>. A function,
// not a global: families are described on first use, which may come during another file's static initialization.
inline std::vector<TemplateArg> forward_block_template_args() {
  return {TemplateArg::kElementType, TemplateArg::kHeadDim, TemplateArg::kBlockM, TemplateArg::kBlockN,
          TemplateArg::kWarps,       TemplateArg::kStages,  TemplateArg::kMask};
}

// KernelFamily::build_launch for those families. Throws Error(kInvalidArgument) when the grid would exceed
// 2^31 - 1 blocks.
void build_forward_block_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args);

}  // namespace flashrtc::detail

#pragma once
// The template-parameter lists the built-in families share (KernelFamily::template_args). Functions, not
// globals: families are described on first use, which may come during another file's static initialization.
#include <vector>

#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

// The attention kernels, forward and backward: <T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kMask>.
inline std::vector<TemplateArg> attention_template_args() {
  return {TemplateArg::kElementType, TemplateArg::kHeadDim, TemplateArg::kBlockM, TemplateArg::kBlockN,
          TemplateArg::kWarps,       TemplateArg::kStages,  TemplateArg::kMask};
}

// The backward's row passes (backward_rows.cuh): <T, kHeadDim, kBlockM, kWarps>.
inline std::vector<TemplateArg> backward_rows_template_args() {
  return {TemplateArg::kElementType, TemplateArg::kHeadDim, TemplateArg::kBlockM, TemplateArg::kWarps};
}

}  // namespace flashrtc::detail

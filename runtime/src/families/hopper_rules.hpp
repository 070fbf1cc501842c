#pragma once
// What the Hopper (sm_90a) families share: wgmma, TMA and setmaxnreg for fp16/bf16, so sm_90 only and the
// "a" target; ranked above the portable families; only calls whose tensors a TMA map can describe; head dims
// a multiple of 32 (the swizzle panels) from 64.
#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

inline void use_hopper_rules(KernelFamily& f, int max_head_dim) {
  f.dtypes = {DType::kFloat16, DType::kBFloat16};
  f.min_cc = 90;
  f.max_cc = 90;
  f.needs_arch_specific = true;
  f.priority = 20;
  f.min_head_dim = 64;
  f.max_head_dim = max_head_dim;
  f.head_dim_multiple = 32;
  f.needs_traits = kCallTmaStrides;
}

}  // namespace flashrtc::detail

#pragma once
// The CallTrait bits of a call's tensors (kernel_family.hpp): computed on every call, so a few comparisons.
#include "flashrtc/attention.hpp"

namespace flashrtc::detail {

unsigned forward_call_traits(const ForwardParams& p);

}  // namespace flashrtc::detail

#pragma once
// The CallTrait bits of a call's tensors (kernel_family.hpp): computed on every call, so a few comparisons.
#include "flashrtc/attention.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/varlen_params.hpp"

namespace flashrtc::detail {

unsigned forward_call_traits(const ForwardParams& p);
// A packed call's tensors, each one batch of total rows (varlen_params.hpp).
unsigned varlen_forward_call_traits(const VarlenForwardParams& p);
unsigned varlen_backward_call_traits(const VarlenBackwardParams& p);
// The tensors the backward kernels read through TMA maps: q, k, v and d_o.
unsigned backward_call_traits(const BackwardParams& p);

}  // namespace flashrtc::detail

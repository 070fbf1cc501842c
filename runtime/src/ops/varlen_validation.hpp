#pragma once
// The argument checks of a variable-length forward or backward call, without the tile (checked when the call
// is resolved) and without the device arrays, which the host cannot read: the kernels bound what they read
// from them.
#include "flashrtc/varlen_params.hpp"

namespace flashrtc::detail {

// Throws Error(kInvalidArgument) naming the argument and its value (the variants' included), then
// Error(kUnsupported) for variants no varlen kernel serves. Allocates nothing when params are valid.
void validate_varlen_arguments(const VarlenForwardParams& params);

// The forward call whose gradients params asks for (its tensors, lse and shape): its rules are the forward's.
VarlenForwardParams forward_of(const VarlenBackwardParams& params);

// The forward's rules (forward_of), then lse present, d_o and d_q packed like q, d_k and d_v like k, d_sinks
// exactly with sinks. Throws Error(kInvalidArgument) naming the argument, then Error(kUnsupported) for
// variants no varlen backward kernel serves. Allocates nothing when params are valid.
void validate_varlen_backward_arguments(const VarlenBackwardParams& params);

}  // namespace flashrtc::detail

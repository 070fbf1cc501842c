#pragma once
// The argument checks of a backward call, without the tile (checked by its family when the call is resolved).
#include "flashrtc/attention_backward.hpp"

namespace flashrtc::detail {

// The forward call whose gradients params asks for (q, k, v, o, lse and the shape): its rules are the
// forward's.
ForwardParams forward_of(const BackwardParams& params);

// The forward's rules for q, k, v, o, the shape and the variants, then d_o and d_q shaped like q, d_k and d_v
// like k, lse present, d_sinks exactly with sinks. Throws Error(kInvalidArgument) naming the argument, then
// Error(kUnsupported) for variants no backward kernel serves. Allocates nothing when params are valid.
void validate_backward_arguments(const BackwardParams& params);

}  // namespace flashrtc::detail

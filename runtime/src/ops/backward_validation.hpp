#pragma once
// The argument checks of a backward call, without the tile (checked by its family when the call is resolved).
#include "flashrtc/attention_backward.hpp"

namespace flashrtc::detail {

// The forward call whose gradients params asks for (q, k, v, o, lse and the shape): its rules are the
// forward's.
ForwardParams forward_of(const BackwardParams& params);

// The forward's rules for q, k, v, o and the shape, then d_o and d_q shaped like q, d_k and d_v like k, and
// lse present. Throws Error(kInvalidArgument) naming the argument. Allocates nothing when params are valid.
void validate_backward_arguments(const BackwardParams& params);

}  // namespace flashrtc::detail

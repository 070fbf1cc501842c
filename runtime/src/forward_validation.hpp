#pragma once
// The argument checks of a forward call, without the tile: a call's tile is checked by its family when the
// call is resolved (config resolution), validate_forward adds the portable family's check for callers that
// have no device.
#include "flashrtc/attention.hpp"

namespace flashrtc::detail {

// Throws Error(kInvalidArgument) naming the argument and its value. Allocates nothing when params are valid.
void validate_forward_arguments(const ForwardParams& params);

}  // namespace flashrtc::detail

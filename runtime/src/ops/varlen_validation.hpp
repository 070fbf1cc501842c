#pragma once
// The argument checks of a variable-length forward call, without the tile (checked when the call is resolved)
// and without the device arrays, which the host cannot read: the kernels bound what they read from them.
#include "flashrtc/varlen_params.hpp"

namespace flashrtc::detail {

// Throws Error(kInvalidArgument) naming the argument and its value. Allocates nothing when params are valid.
void validate_varlen_arguments(const VarlenForwardParams& params);

}  // namespace flashrtc::detail

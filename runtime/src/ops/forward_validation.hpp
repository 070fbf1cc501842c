#pragma once
// The argument checks of a forward call, without the tile: a call's tile is checked by its family when the
// call is resolved (config resolution), validate_forward adds the portable family's check for callers that
// have no device.
#include "flashrtc/attention.hpp"

namespace flashrtc::detail {

// Throws Error(kInvalidArgument) naming the argument and its value, the variants' values included.
// Allocates nothing when params are valid.
void check_forward_arguments(const ForwardParams& params);
// check_forward_arguments, then Error(kUnsupported) for variants no forward kernel serves: the check of
// every forward entry point.
void validate_forward_arguments(const ForwardParams& params);

// The rules for one [batch, seqlen, heads, head_dim] tensor of elem-byte elements (non-null, 16-byte aligned
// rows, contiguous head dim, strides that fit a 64-bit byte offset). Throws Error(kInvalidArgument) naming
// it.
void check_tensor(const char* name, const TensorRef& t, std::int64_t seqlen, std::int64_t heads,
                  std::int64_t batch, std::int64_t head_dim, std::size_t elem);

}  // namespace flashrtc::detail

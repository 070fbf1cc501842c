#pragma once
// The argument checks of the KV-cache calls and merge_states, without the tile (checked by its family when
// the call is resolved).
#include "flashrtc/attention_kvcache.hpp"

namespace flashrtc::detail {

// Throws Error(kInvalidArgument) naming the argument and its value (the variants' included), then
// Error(kUnsupported) for variants no decode kernel serves. Allocates nothing when params are valid.
void validate_kvcache_arguments(const KvCacheParams& params);
void validate_merge_states_arguments(const MergeStatesParams& params);

}  // namespace flashrtc::detail

#pragma once
// The launch path's side of config resolution (flashrtc/config_resolution.hpp): the target of a context,
// and the resolution without the explanation texts that `flashrtc config` prints.
#include "driver/context.hpp"
#include "flashrtc/config_resolution.hpp"

namespace flashrtc::detail {

DeviceTarget device_target_for(const ContextInfo& context);

// resolve_config(query, target) without the explanation texts, with the same checks and errors.
ConfigResolution resolve_call(const ConfigQuery& query, const DeviceTarget& target);

}  // namespace flashrtc::detail

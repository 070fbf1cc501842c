#pragma once
// A counter of changes that can alter how a call resolves (set_runtime_config, a new tuning-database entry,
// a family registered or removed). Memos of resolved calls compare it instead of re-reading the settings.
#include <cstdint>

namespace flashrtc::detail {

std::uint64_t settings_generation();
void bump_settings_generation();

}  // namespace flashrtc::detail

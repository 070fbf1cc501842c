#pragma once
/// GPU architecture names ("sm_80", "sm_90a", "sm_100f"): the one parser for the runtime, the tools and the
/// command line.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashrtc/export.hpp"

namespace flashrtc {

/// The oldest and newest compute capability flashrtc compiles for (sm_80: the kernels need cp.async and
/// bf16 mma; sm_121: the newest NVRTC 13 targets).
inline constexpr int kMinArchCc = 80;
inline constexpr int kMaxArchCc = 121;

/// The compute capability in an arch name: "sm_<2 or 3 digits>" with an optional "a" (arch-specific, sm_90
/// and newer) or "f" (family, sm_100 and newer) suffix; "sm_90a" -> 90. nullopt for anything else ("sm_xx",
/// "sm_1", "", "sm_80a", a number too long to be an arch); never throws.
FLASHRTC_API std::optional<int> parse_arch_cc(std::string_view arch);

/// True when arch parses, lies in [kMinArchCc, kMaxArchCc] and the linked NVRTC can target it.
FLASHRTC_API bool is_supported_arch(std::string_view arch);

/// The compute capabilities is_supported_arch accepts, ascending (e.g. 80, 86, 87, 88, 89, 90, 100, ...).
FLASHRTC_API std::vector<int> supported_arch_ccs();

/// What an error about a bad arch says is accepted: "sm_80, sm_86, ..., sm_121 (sm_90 and newer also with
/// an a suffix, e.g. sm_90a; sm_100 and newer with an f suffix)".
FLASHRTC_API std::string supported_archs_text();

}  // namespace flashrtc

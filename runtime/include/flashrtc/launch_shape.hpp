#pragma once
/// Deprecated: LaunchShape is declared in flashrtc/kernel_launch.hpp with KernelArgs; include that. This
/// header stays for one release.
#include "flashrtc/kernel_launch.hpp"

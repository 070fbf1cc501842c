#pragma once
/// Everything a host application needs.
#include "flashrtc/attention.hpp"
#include "flashrtc/cache_entries.hpp"
#include "flashrtc/config.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/device.hpp"
#include "flashrtc/device_memory.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel.hpp"
#include "flashrtc/tile_config.hpp"
#include "flashrtc/tuning_db.hpp"
#include "flashrtc/tuning_space.hpp"
#include "flashrtc/types.hpp"

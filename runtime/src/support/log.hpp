#pragma once
// The runtime's logger ("flashrtc", stderr). Level from RuntimeConfig::log_level.
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace flashrtc::detail {

spdlog::logger& log();
void set_log_level(const std::string& level);

}  // namespace flashrtc::detail

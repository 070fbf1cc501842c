#include "log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "flashrtc/config.hpp"

namespace flashrtc::detail {

namespace {
std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = std::make_shared<spdlog::logger>("flashrtc", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[%H:%M:%S.%e] [flashrtc] [%^%l%$] %v");
  logger->set_level(spdlog::level::from_str(runtime_config().log_level));
  return logger;
}
}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(const std::string& level) { log().set_level(spdlog::level::from_str(level)); }

}  // namespace flashrtc::detail

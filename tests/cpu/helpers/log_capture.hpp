#pragma once
// Collects the runtime's log lines ("<level> <message>") while alive.
#include <spdlog/sinks/ringbuffer_sink.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "support/log.hpp"

namespace flashrtc::test {

class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1024)) {
    sink_->set_pattern("%l %v");
    detail::log().sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = detail::log().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::vector<std::string> warnings() const { return at_level("warning"); }
  std::vector<std::string> errors() const { return at_level("error"); }

 private:
  std::vector<std::string> at_level(const std::string& level) const {
    std::vector<std::string> found;
    for (const std::string& line : sink_->last_formatted())
      if (line.rfind(level + " ", 0) == 0) found.push_back(line);
    return found;
  }

  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

}  // namespace flashrtc::test

#include "support/log.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

#include "flashrtc/config.hpp"
#include "flashrtc/error.hpp"
#include "flashrtc/log_writer.hpp"

namespace flashrtc::detail {

namespace {

// stderr (colored on a terminal) unless a LogWriter takes the lines (set_log_writer).
class WriterSink final : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!writer_) return stderr_->log(msg);
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    writer_(std::string(line.data(), line.size()));
  }
  void flush() override { stderr_->flush(); }
  void set_pattern(const std::string& pattern) override {
    set_formatter(std::make_unique<spdlog::pattern_formatter>(pattern));
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    std::lock_guard<std::mutex> lock(mutex_);
    stderr_->set_formatter(formatter->clone());
    formatter_ = std::move(formatter);
  }
  void set_writer(LogWriter writer) {
    std::lock_guard<std::mutex> lock(mutex_);
    writer_ = std::move(writer);
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<spdlog::sinks::sink> stderr_ = std::make_shared<spdlog::sinks::stderr_color_sink_st>();
  std::unique_ptr<spdlog::formatter> formatter_ = std::make_unique<spdlog::pattern_formatter>();
  LogWriter writer_;
};

const std::shared_ptr<WriterSink>& writer_sink() {
  static const std::shared_ptr<WriterSink> sink = std::make_shared<WriterSink>();
  return sink;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = std::make_shared<spdlog::logger>("flashrtc", writer_sink());
  logger->set_pattern("[%H:%M:%S.%e] [flashrtc] [%^%l%$] %v");
  // A refused FLASHRTC_LOG_LEVEL fails the call that reads the settings; the logger must still log.
  std::string level = "warn";
  try {
    level = runtime_config().log_level;
  } catch (const Error&) {
  }
  logger->set_level(spdlog::level::from_str(level));
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(const std::string& level) {
  log().set_level(spdlog::level::from_str(level));
}

}  // namespace flashrtc::detail

namespace flashrtc {

void set_log_writer(LogWriter writer) {
  detail::writer_sink()->set_writer(std::move(writer));
}

}  // namespace flashrtc

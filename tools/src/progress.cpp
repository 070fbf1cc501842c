#include "flashrtc_tools/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace flashrtc::tools {

Progress::Progress(std::string label, std::size_t total)
    : label_(std::move(label)), total_(total), terminal_(::isatty(STDOUT_FILENO) == 1) {}

Progress::~Progress() {
  if (line_open_) std::printf("\n");
  std::fflush(stdout);
}

void Progress::step(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++done_;
  if (terminal_) {
    // \r and "erase line": the next step overwrites this one.
    std::printf("\r\033[K%s [%zu/%zu] %s", label_.c_str(), done_, total_, what.c_str());
    line_open_ = true;
  } else {
    std::printf("%s %zu/%zu: %s\n", label_.c_str(), done_, total_, what.c_str());
  }
  std::fflush(stdout);
}

void Progress::note(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (line_open_) std::printf("\r\033[K");
  std::printf("%s\n", text.c_str());
  if (line_open_) std::printf("%s [%zu/%zu]", label_.c_str(), done_, total_);
  std::fflush(stdout);
}

}  // namespace flashrtc::tools

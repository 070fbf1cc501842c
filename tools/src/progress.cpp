#include "flashrtc_tools/progress.hpp"

#include <unistd.h>

#include "flashrtc/log_writer.hpp"

namespace flashrtc::tools {

Progress::Progress(std::string label, std::size_t total, bool steps_off_terminal)
    : Progress(std::move(label), total, steps_off_terminal, stdout, stderr, ::isatty(STDOUT_FILENO) == 1) {}

Progress::Progress(std::string label, std::size_t total, bool steps_off_terminal, std::FILE* out,
                   std::FILE* err, bool terminal)
    : label_(std::move(label)),
      total_(total),
      steps_off_terminal_(steps_off_terminal),
      out_(out),
      err_(err),
      terminal_(terminal) {
  if (!terminal_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draw_line();
  }
  set_log_writer([this](const std::string& line) { log_line(line); });
}

Progress::~Progress() {
  if (!terminal_) return;
  set_log_writer({});  // no log line reaches this object once it returns
  std::lock_guard<std::mutex> lock(mutex_);
  std::fputs("\n", out_);
  std::fflush(out_);
}

// "\r" and "erase line": what follows starts on the line the progress line held.
void Progress::clear_line() {
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
}

void Progress::draw_line() {
  std::fprintf(out_, "%s [%zu/%zu]%s%s", label_.c_str(), done_, total_, last_.empty() ? "" : " ",
               last_.c_str());
  std::fflush(out_);
}

void Progress::step(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++done_;
  if (terminal_) {
    last_ = what;
    clear_line();
    draw_line();
  } else if (steps_off_terminal_) {
    std::fprintf(out_, "%s %zu/%zu: %s\n", label_.c_str(), done_, total_, what.c_str());
    std::fflush(out_);
  }
}

void Progress::note(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (terminal_) clear_line();
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
  if (terminal_) draw_line();
}

void Progress::log_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_line();
  std::fputs(line.c_str(), err_);
  std::fflush(err_);
  draw_line();
}

}  // namespace flashrtc::tools

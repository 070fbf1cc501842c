#pragma once
// Progress of a batch of work (compiles, timings): on a terminal one line redrawn in place, below the lines
// printed so far; otherwise one plain line per step so logs and pipes stay readable. While the line is
// drawn, the runtime's log lines (set_log_writer) and notes are printed on lines of their own above it and
// the line is redrawn after them, so nothing is ever printed into it. Thread-safe.
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>

namespace flashrtc::tools {

class Progress {
 public:
  /// Draws on stdout when it is a terminal. steps_off_terminal: whether a step prints a line of its own when
  /// stdout is not a terminal (false where the caller prints the results itself, as `compile --all` does).
  Progress(std::string label, std::size_t total, bool steps_off_terminal = true);
  /// Draws on out (as on a terminal when terminal is true), log lines on err: what the tests watch.
  Progress(std::string label, std::size_t total, bool steps_off_terminal, std::FILE* out, std::FILE* err,
           bool terminal);
  ~Progress();  // ends the line; log lines go to stderr again
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// One step done; what says which and how it went.
  void step(const std::string& what);
  /// A line of its own (a result row, a failure's details), kept on screen above the progress line.
  void note(const std::string& text);

 private:
  void log_line(const std::string& line);
  void clear_line();  // with mutex_ held
  void draw_line();   // with mutex_ held

  std::mutex mutex_;
  std::string label_, last_;
  std::size_t total_, done_ = 0;
  bool steps_off_terminal_;
  std::FILE* out_;
  std::FILE* err_;
  bool terminal_;
};

}  // namespace flashrtc::tools

#pragma once
// Progress of a batch of work (compiles, timings): on a terminal one line rewritten in place, otherwise
// one plain line per step so logs and pipes stay readable. Thread-safe.
#include <cstddef>
#include <mutex>
#include <string>

namespace flashrtc::tools {

class Progress {
 public:
  Progress(std::string label, std::size_t total);
  ~Progress();  // ends the terminal line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// One step done; what says which and how it went.
  void step(const std::string& what);
  /// A line of its own (e.g. a failure's details), kept on screen above the progress line.
  void note(const std::string& text);

 private:
  std::mutex mutex_;
  std::string label_;
  std::size_t total_, done_ = 0;
  bool terminal_;
  bool line_open_ = false;
};

}  // namespace flashrtc::tools

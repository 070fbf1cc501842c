#pragma once
// Where the runtime's log lines go.
#include <functional>
#include <string>

#include "flashrtc/export.hpp"

namespace flashrtc {

/// Receives each log line formatted ("[12:00:00.000] [flashrtc] [warning] ...\n", newline included).
using LogWriter = std::function<void(const std::string& line)>;

/// Sends the runtime's log lines to writer instead of stderr; an empty writer restores stderr. For a program
/// that keeps a line of its own on the terminal (a progress line): its writer clears that line, writes the
/// log line and redraws, so the two never share a line. The writer is called from any thread that logs,
/// one line at a time, and must not call back into flashrtc; once set_log_writer returns, the previous
/// writer is no longer called. The level (FLASHRTC_LOG_LEVEL) still decides what is logged.
FLASHRTC_API void set_log_writer(LogWriter writer);

}  // namespace flashrtc

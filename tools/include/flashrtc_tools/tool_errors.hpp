#pragma once
// What the tools throw besides flashrtc::Error: a value the caller gave that a tool rejects, and a program
// the tools run but flashrtc does not ship. The `flashrtc` command maps them to exit codes 2 and 3.
#include <stdexcept>

namespace flashrtc::tools {

/// A caller's value that a tool rejects (an option, a file name); the message names it and what is accepted.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A program a tool needs (cuobjdump, nvdisasm) is missing or failed; the message says how to get it.
class MissingTool : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace flashrtc::tools

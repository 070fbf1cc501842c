#pragma once
// The bounded reader under the name the runtime's own files use; it is public (flashrtc/bounded_read.hpp)
// for the tools, which read files the user names.
#include "flashrtc/bounded_read.hpp"

namespace flashrtc::detail {

using flashrtc::BoundedRead;
using flashrtc::read_file_bounded;

}  // namespace flashrtc::detail

#pragma once
// The kernel sources NVRTC compiles: the embedded copy, or FLASHRTC_KERNEL_DIR's files when set (so a
// kernel can be edited and re-run without rebuilding).
#include <string>
#include <utility>
#include <vector>

namespace flashrtc::detail {

struct KernelSourceSet {
  std::vector<std::pair<std::string, std::string>> files;  // include path -> content, sorted by path
  std::string hash;    // digest of every path and content: part of each cache key
  std::string origin;  // "embedded" or the directory read
};

// Loaded once per process (per directory). Throws Error(kCacheIo) when FLASHRTC_KERNEL_DIR cannot be read.
const KernelSourceSet& kernel_sources();

}  // namespace flashrtc::detail

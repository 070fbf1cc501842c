#pragma once
// The table that cmake/embed_sources.cmake generates from kernel_sources/.
#include <string_view>
#include <vector>

namespace flashrtc::detail {

struct EmbeddedSource {
  std::string_view path;  // relative to kernel_sources/, e.g. "flashrtc/attention_forward_simt.cuh"
  std::string_view content;
};

const std::vector<EmbeddedSource>& embedded_kernel_sources();

}  // namespace flashrtc::detail

#include "cli_support.hpp"

#include <charconv>

#include "flashrtc_tools/host_tensors.hpp"

namespace flashrtc::cli {

CLI::Validator dtype_validator() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        return parse_dtype(name) ? std::string() : "unknown dtype '" + name + "' (fp32, fp16, bf16)";
      },
      "fp32|fp16|bf16");
}

CLI::Validator mask_validator() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        return parse_mask(name) ? std::string() : "unknown mask '" + name + "' (none, causal, causal-br)";
      },
      "none|causal|causal-br");
}

CLI::Validator head_dim_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int head_dim = 0;
        const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), head_dim);
        if (status != std::errc() || end != text.data() + text.size() || !is_supported_head_dim(head_dim))
          return "head dim " + text + ": must be a multiple of 8 from 8 to " + std::to_string(kMaxHeadDim);
        return {};
      },
      "8..256, multiple of 8");
}

CLI::Validator layout_validator() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        return tools::parse_layout(name) ? std::string() : "unknown layout '" + name + "' (bnhd, bhnd)";
      },
      "bnhd|bhnd");
}

DType dtype_from(const std::string& name) {
  if (const auto dtype = parse_dtype(name)) return *dtype;
  throw UsageError("unknown dtype '" + name + "' (fp32, fp16, bf16)");
}

MaskKind mask_from(const std::string& name) {
  if (const auto mask = parse_mask(name)) return *mask;
  throw UsageError("unknown mask '" + name + "' (none, causal, causal-br)");
}

int exit_code_for(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupported:
      return kExitUsage;
    default:
      return kExitDevice;
  }
}

}  // namespace flashrtc::cli

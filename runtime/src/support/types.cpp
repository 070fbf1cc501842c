#include "flashrtc/types.hpp"

namespace flashrtc {

std::size_t dtype_size(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "fp32";
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
  }
  return "unknown";
}

std::string_view to_string(MaskKind mask) {
  switch (mask) {
    case MaskKind::kNone: return "none";
    case MaskKind::kCausalTopLeft: return "causal";
    case MaskKind::kCausalBottomRight: return "causal-br";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "float") return DType::kFloat32;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kFloat16;
  if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
  return std::nullopt;
}

std::optional<MaskKind> parse_mask(std::string_view name) {
  if (name == "none") return MaskKind::kNone;
  if (name == "causal" || name == "causal-tl" || name == "causal-top-left") return MaskKind::kCausalTopLeft;
  if (name == "causal-br" || name == "causal-bottom-right") return MaskKind::kCausalBottomRight;
  return std::nullopt;
}

}  // namespace flashrtc

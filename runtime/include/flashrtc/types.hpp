#pragma once
/// Vocabulary types shared by the runtime, the tools and the tests.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "flashrtc/export.hpp"

namespace flashrtc {

/// Element type of q, k, v and o. Accumulation is always fp32.
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

/// Which keys a query may attend to. Query i, key j, lengths Nq and Nk:
/// kNone: all keys. kCausalTopLeft: j <= i (PyTorch's is_causal).
/// kCausalBottomRight: j <= i + Nk - Nq (FlashAttention's, queries appended to a longer key sequence).
/// A query with no visible key gets output 0 and lse = -inf.
enum class MaskKind : int { kNone = 0, kCausalTopLeft = 1, kCausalBottomRight = 2 };
/// Every MaskKind, in enum order.
inline constexpr MaskKind kMaskKinds[] = {MaskKind::kNone, MaskKind::kCausalTopLeft,
                                          MaskKind::kCausalBottomRight};

/// Bytes of one element.
FLASHRTC_API std::size_t dtype_size(DType dtype);
/// "fp32", "fp16", "bf16".
FLASHRTC_API std::string_view to_string(DType dtype);
/// "none", "causal", "causal-br".
FLASHRTC_API std::string_view to_string(MaskKind mask);
/// Accepts the names above (and "float32"/"float16"/"bfloat16", "causal-tl"/"causal-bottom-right"); nullopt otherwise.
FLASHRTC_API std::optional<DType> parse_dtype(std::string_view name);
FLASHRTC_API std::optional<MaskKind> parse_mask(std::string_view name);

/// True when query i may see key j under mask for lengths (seqlen_q, seqlen_kv).
constexpr bool mask_allows(MaskKind mask, std::int64_t i, std::int64_t j, std::int64_t seqlen_q,
                           std::int64_t seqlen_kv) {
  switch (mask) {
    case MaskKind::kNone: return true;
    case MaskKind::kCausalTopLeft: return j <= i;
    case MaskKind::kCausalBottomRight: return j <= i + seqlen_kv - seqlen_q;
  }
  return true;
}

}  // namespace flashrtc

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
/// Accepts the names above (and "float32"/"float16"/"bfloat16", "causal-tl"/"causal-bottom-right"); nullopt
/// otherwise.
FLASHRTC_API std::optional<DType> parse_dtype(std::string_view name);
FLASHRTC_API std::optional<MaskKind> parse_mask(std::string_view name);

/// Query i's diagonal key for lengths (seqlen_q, seqlen_kv): 0 under kCausalTopLeft, seqlen_kv - seqlen_q
/// otherwise (bottom-right; FlashAttention's alignment of sliding windows and ALiBi without a causal mask).
constexpr std::int64_t mask_diagonal(MaskKind mask, std::int64_t seqlen_q, std::int64_t seqlen_kv) {
  return mask == MaskKind::kCausalTopLeft ? 0 : seqlen_kv - seqlen_q;
}

/// True when query i may see key j (0 <= j < seqlen_kv) under mask and a sliding window for lengths
/// (seqlen_q, seqlen_kv): with d = mask_diagonal(mask, seqlen_q, seqlen_kv), j <= i + d under a causal mask,
/// j >= i + d - window_left when window_left >= 0, j <= i + d + window_right when window_right >= 0 (-1:
/// unbounded on that side, FlashAttention's window_size=(-1, -1)).
constexpr bool mask_allows(MaskKind mask, std::int64_t i, std::int64_t j, std::int64_t seqlen_q,
                           std::int64_t seqlen_kv, std::int64_t window_left, std::int64_t window_right) {
  const std::int64_t diagonal = i + mask_diagonal(mask, seqlen_q, seqlen_kv);
  return (mask == MaskKind::kNone || j <= diagonal) && (window_left < 0 || j >= diagonal - window_left) &&
         (window_right < 0 || j <= diagonal + window_right);
}

/// True when query i may see key j under mask for lengths (seqlen_q, seqlen_kv), without a window.
constexpr bool mask_allows(MaskKind mask, std::int64_t i, std::int64_t j, std::int64_t seqlen_q,
                           std::int64_t seqlen_kv) {
  return mask_allows(mask, i, j, seqlen_q, seqlen_kv, -1, -1);
}

}  // namespace flashrtc

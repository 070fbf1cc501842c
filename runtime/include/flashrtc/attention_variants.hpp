#pragma once
/// Built-in attention variants: sliding window, logit softcap, ALiBi and attention sinks, a member `variants`
/// of every call's parameters (attention_params.hpp, varlen_params.hpp, kvcache_params.hpp). Argument names
/// follow FlashAttention's (window_size = (left, right), softcap, alibi_slopes) where it has them. The
/// defaults are "off"; docs/variants.md says which calls a kernel serves (a call with a variant no kernel of
/// its operation serves is refused with ErrorCode::kUnsupported naming the variant, never run without it).
///
/// Query i and key j count from their sequence's start (0-based); Nq and Nk are the sequence's lengths (of a
/// KV cache: Nk is the sequence's length after the append); b is the batch (sequence) and h the query head.
///
/// Alignment: diag = 0 under MaskKind::kCausalTopLeft, else Nk - Nq (bottom-right, also for MaskKind::kNone).
///
/// Visibility: key j is visible to query i iff
///   j < Nk, the call's mask allows it (causal: j <= i + diag),
///   window_left  >= 0 => j >= i + diag - window_left, and
///   window_right >= 0 => j <= i + diag + window_right.
/// A causal mask with window_right > 0 is the same as window_right = 0.
///
/// Score of a visible key, from raw = softmax_scale * (q_i . k_j):
///   s = raw                                  softcap = 0
///   s = softcap * tanh(raw / softcap)        softcap > 0
///   s = s - slope(b, h) * |i + diag - j|     alibi_slopes set: slope(b, h) = alibi_slopes[b * stride + h]
/// Softmax over the visible keys, with a sink adding exp(sinks[h]) to the denominator (no value row):
///   lse_i = log(exp(sinks[h]) + sum_{visible j} exp(s_ij))   (natural log; without sinks, no first term)
///   o_i = sum_{visible j} exp(s_ij - lse_i) v_j
/// A row with no visible key gets o = 0 and lse = sinks[h] (with sinks) or -inf (without).
///
/// Backward (D_i = rowsum(dO_i * o_i), P_ij = exp(s_ij - lse_i)): dS_ij = P_ij (dO_i . v_j - D_i); with
/// softcap the score's derivative is multiplied by 1 - tanh^2(raw / softcap); ALiBi slopes are constants (no
/// gradient); the sinks' gradient is d_sinks[h] = -sum over (b, i) of exp(sinks[h] - lse_i) * D_i.
#include <cstdint>

namespace flashrtc {

struct AttentionVariants {
  /// Keys visible left of (before) and right of (after) the aligned diagonal i + diag; -1: unbounded on that
  /// side (FlashAttention's window_size = (-1, -1)). Values below -1 are invalid.
  std::int64_t window_left = -1, window_right = -1;
  /// 0: off; > 0: scores pass through softcap * tanh(s / softcap). Negative or non-finite is invalid.
  float softcap = 0.f;
  /// Optional ALiBi slopes on the device, fp32, 4-byte aligned: [Hq] (alibi_stride_batch 0: the same slopes
  /// for every batch) or [B, Hq] with rows alibi_stride_batch >= Hq elements apart; head stride 1.
  const float* alibi_slopes = nullptr;
  std::int64_t alibi_stride_batch = 0;  ///< 0 or >= heads_q; must be 0 without alibi_slopes
  /// Optional attention sinks on the device: [Hq] fp32, 4-byte aligned, one natural-log logit per query head
  /// in the units of the scores s. A backward with sinks writes their gradient to its d_sinks.
  const float* sinks = nullptr;

  /// True when a field differs from its default (a variant is on, or asked for with an invalid value).
  bool any() const {
    return window_left != -1 || window_right != -1 || softcap != 0.f || alibi_slopes != nullptr ||
           alibi_stride_batch != 0 || sinks != nullptr;
  }
};

/// The variants a kernel computes, a bit set: a call's (variant_bits), a kernel specialization's
/// (KernelSpec::variants, compiled in) and the ones a family serves (KernelFamily::serves_variants).
enum VariantBit : unsigned {
  kVariantWindow = 1u << 0,   ///< window_left or window_right set (not -1)
  kVariantSoftcap = 1u << 1,  ///< softcap > 0
  kVariantAlibi = 1u << 2,    ///< alibi_slopes set
  kVariantSinks = 1u << 3,    ///< sinks set
};

/// The VariantBit bits of a call's variants.
inline unsigned variant_bits(const AttentionVariants& v) {
  return (v.window_left != -1 || v.window_right != -1 ? kVariantWindow : 0u) |
         (v.softcap > 0.f ? kVariantSoftcap : 0u) | (v.alibi_slopes ? kVariantAlibi : 0u) |
         (v.sinks ? kVariantSinks : 0u);
}

}  // namespace flashrtc

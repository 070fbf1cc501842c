#pragma once
// The built-in modifiers of a score before the softmax, shared by every kernel family (compiled by NVRTC and
// by the host compiler: tests/cpu/test_score_mods.cpp).
//
// Softcap (Gemma 2's logit softcapping), softcap > 0: s = softcap * tanh(scale * q.k / softcap) replaces
// s = scale * q.k. The kernels keep scores in the log2 domain: without a cap they multiply q.k by
// scale_log2 = scale * log2(e) and exponentiate with exp2 (online_softmax.cuh). tanh is not linear, so the
// softmax scale goes inside it and log2(e) outside: s * log2(e) = post * tanh(pre * q.k) with
// pre = scale / softcap and post = softcap * log2(e) (Softcap below), and the kernel uses no scale_log2.
//   - A kernel that multiplies scores by scale_log2 multiplies them by neither: it replaces each q.k by
//     softcap_log2(q.k), the log2-domain score, and goes on as before (exp2(s - m), m and lse as today).
//   - A kernel that folds the scale into the exponent (online_softmax_rows_unscaled's `scale`) replaces each
//     q.k by t = softcap_tanh(pre * q.k) and passes post as that scale (post > 0, so a hidden score is -inf).
//   Either way the mask comes after the cap: tanh takes a hidden -inf to -1, not to -inf.
//   - The backward recomputes P from the same log2-domain score, keeping t, and multiplies dS = P (dP - D)
//   (the
//     gradient w.r.t. s) by softcap_derivative(t) = 1 - t^2 (ds / d(scale q.k)) before its usual
//     dQ = scale * dS K and dK = scale * dS^T Q. Where only the score is at hand, t = s_log2 / post.
#include "flashrtc/host_device.cuh"

#ifndef __CUDACC_RTC__
#include <cmath>
#endif

namespace flashrtc {

// The two factors of a softcap in the log2 domain, for the kernel's parameters.
struct Softcap {
  float pre;   // scale / softcap: q.k times this is tanh's argument
  float post;  // softcap * log2(e): tanh times this is the capped score in the log2 domain
};

// The factors of a softmax scale and a softcap > 0 (validated by the caller), rounded once from double: the
// host fills the kernel parameters with them.
constexpr Softcap softcap_factors(double scale, double softcap) {
  return {static_cast<float>(scale / softcap), static_cast<float>(softcap * 1.4426950408889634)};
}

// tanh(x). kApprox: tanh.approx.f32 (sm_75 and later; one MUFU instruction, relative error near 2^-11, what
// FlashAttention's softcap uses); otherwise, and on the host, the library's tanh. The kernels take the library's:
// with the approximation the tensor-core forward's lse missed the tolerance rule on an H200 (fp16, d = 64 and
// 128, softcaps 5 and 30: errors 9e-6 to 2e-5 against 6-8e-6 allowed), its o within it.
template <bool kApprox>
FLASHRTC_DEVICE_INLINE float softcap_tanh(float x) {
#ifdef __CUDACC_RTC__
#if __CUDA_ARCH__ >= 750
  if constexpr (kApprox) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
#endif
  return tanhf(x);
#else
  return std::tanh(x);
#endif
}

// The capped score in the log2 domain of an unscaled q.k.
template <bool kApprox>
FLASHRTC_DEVICE_INLINE float softcap_log2(const Softcap& cap, float qk) {
  return cap.post * softcap_tanh<kApprox>(cap.pre * qk);
}

// d softcap(raw) / d raw = 1 - tanh^2(raw / softcap) for raw = scale * q.k, from t = tanh(raw / softcap).
FLASHRTC_DEVICE_INLINE constexpr float softcap_derivative(float t) {
  return 1.f - t * t;
}

}  // namespace flashrtc

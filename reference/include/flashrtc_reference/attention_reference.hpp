#pragma once
/// CPU reference attention (Eigen). Double precision is the truth every kernel is checked against; the
/// "input precision" variant gives the error budget of the tolerance rule (Comparison, below).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashrtc/types.hpp"

namespace flashrtc::reference {

/// Shapes and options of one forward attention problem.
///
/// The variants follow flashrtc/attention_variants.hpp's semantics (diag = 0 under kCausalTopLeft, else
/// seqlen_kv - seqlen_q): key j is visible to query i when the mask allows it and, for a bound >= 0,
/// i + diag - window_left <= j <= i + diag + window_right; the score raw = scale * q.k becomes
/// softcap * tanh(raw / softcap) (softcap > 0), minus slope(b, h) * |i + diag - j| (ALiBi); a sink adds
/// exp(sinks[h]) to the softmax denominator, so a row with no visible key gets o = 0 and lse = sinks[h].
struct Problem {
  std::int64_t batch = 1, seqlen_q = 1, seqlen_kv = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  MaskKind mask = MaskKind::kNone;
  std::optional<double> scale;  ///< unset: 1/sqrt(head_dim)
  std::int64_t window_left = -1, window_right = -1;  ///< -1: unbounded; below -1 is invalid
  double softcap = 0;                                ///< 0: off; negative or non-finite is invalid
  /// ALiBi slopes: empty (none), [heads_q] (every batch alike) or [batch * heads_q] (batch-major).
  std::vector<double> alibi_slopes;
  std::vector<double> sinks;  ///< empty (none) or [heads_q] natural-log logits
  double effective_scale() const;
  /// True when a variant is set (a window bound, softcap, slopes or sinks).
  bool has_variants() const;
};

/// A host tensor [batch, seq, head, dim] with element strides (same convention as flashrtc::TensorRef).
template <typename T>
struct HostTensor {
  T* data = nullptr;
  std::int64_t stride_batch = 0, stride_seq = 0, stride_head = 0, stride_dim = 1;
  T& at(std::int64_t b, std::int64_t n, std::int64_t h, std::int64_t d) const {
    return data[b * stride_batch + n * stride_seq + h * stride_head + d * stride_dim];
  }
  static HostTensor bnhd(T* data, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim) {
    return {data, seqlen * heads * head_dim, heads * head_dim, head_dim, 1};
  }
};

/// lse is [B, Hq, Nq] contiguous, natural log; rows with no visible key get o = 0 and lse = -inf.
/// q [B,Nq,Hq,d]; k, v [B,Nk,Hkv,d]; query head h reads kv head h / (Hq / Hkv).
/// Every function below throws std::invalid_argument when an extent is below 1, heads_q is not a multiple of
/// heads_kv, (b, h) is out of range, a block size is below 1, a required pointer is null or a variant is
/// invalid (a window below -1, a negative or non-finite softcap, slopes or sinks of another size). Distinct
/// heads may be computed concurrently. forward_loops and forward_tiled take no variants (they throw).

/// Double-precision reference for one (batch, query head); writes o rows of that head and its lse row.
void forward_head(const Problem& p, std::int64_t b, std::int64_t h, const HostTensor<const double>& q,
                  const HostTensor<const double>& k, const HostTensor<const double>& v,
                  const HostTensor<double>& o, double* lse /* nullable, [B,Hq,Nq] */);
/// All heads.
void forward(const Problem& p, const HostTensor<const double>& q, const HostTensor<const double>& k,
             const HostTensor<const double>& v, const HostTensor<double>& o, double* lse);

/// Reference gradients (analytic, double) of the forward above, given its o and lse and the upstream
/// gradient dout [B,Nq,Hq,d] (dq like q; dk, dv like k). With P = exp(s - lse) on visible keys (0 elsewhere,
/// and on rows whose lse is -inf), s the score of raw = scale * q k^T (Problem), and D = rowsum(dout * o):
///   dV = P^T dO,  dS = P * (dO V^T - D),  dRaw = dS * ds/draw,  dQ = scale * dRaw K,  dK = scale * dRaw^T Q,
/// where ds/draw = 1 - tanh^2(raw / softcap) with a softcap, else 1 (ALiBi slopes are constants), and with
/// sinks d_sinks[h] = -sum over (b, i) of exp(sinks[h] - lse) * D. lse must not be null; d_sinks ([Hq],
/// nullable: not written) is only written with sinks.

/// D = rowsum(dout * o) for every (b, h, i), written to delta ([B,Hq,Nq] contiguous, like lse): the
/// backward's pre-pass.
void backward_delta(const Problem& p, const HostTensor<const double>& o, const HostTensor<const double>& dout,
                    double* delta);
/// One (batch, query head): overwrites the dq rows of head h and ADDS this head's share to the dk and dv rows
/// of its kv head h / (Hq / Hkv), so that the query heads of one GQA group sum into it; the caller zeroes dk
/// and dv first. Query heads that share a kv head must not run concurrently. With sinks, ADDS this (b, h)'s
/// share to d_sinks[h].
void backward_head(const Problem& p, std::int64_t b, std::int64_t h, const HostTensor<const double>& q,
                   const HostTensor<const double>& k, const HostTensor<const double>& v,
                   const HostTensor<const double>& o, const double* lse, const HostTensor<const double>& dout,
                   const HostTensor<double>& dq, const HostTensor<double>& dk, const HostTensor<double>& dv,
                   double* d_sinks = nullptr);
/// All heads: overwrites dq, dk and dv (zeroes dk and dv, then accumulates every query head into them), and
/// with sinks d_sinks.
void backward(const Problem& p, const HostTensor<const double>& q, const HostTensor<const double>& k,
              const HostTensor<const double>& v, const HostTensor<const double>& o, const double* lse,
              const HostTensor<const double>& dout, const HostTensor<double>& dq,
              const HostTensor<double>& dk, const HostTensor<double>& dv, double* d_sinks = nullptr);

/// The backward as the kernels compute it at their input precision (the error budget of the tolerance rule):
/// fp32 arithmetic on the inputs as given (already representable in dtype), lse read as fp32, P rounded to
/// dtype before P^T dO and dS before dS K and dS^T Q (the tensor-core operands; a no-op for fp32), dK and dV
/// summed over a GQA group in fp32, every gradient rounded to dtype; the variants' scores and derivative and
/// the sinks' gradient in fp32 (d_sinks stays fp32). For the query heads of kv head hk in batch b: overwrites
/// their dq rows and the dk and dv rows of hk, and with sinks ADDS their shares to d_sinks. Distinct (b, hk)
/// may run concurrently when d_sinks is null or has no sinks to write.
void backward_group_input_precision(const Problem& p, DType dtype, std::int64_t b, std::int64_t hk,
                                    const HostTensor<const double>& q, const HostTensor<const double>& k,
                                    const HostTensor<const double>& v, const HostTensor<const double>& o,
                                    const double* lse, const HostTensor<const double>& dout,
                                    const HostTensor<double>& dq, const HostTensor<double>& dk,
                                    const HostTensor<double>& dv, double* d_sinks = nullptr);
/// All (batch, kv head) groups, concurrently: overwrites dq, dk and dv, and with sinks d_sinks.
void backward_input_precision(const Problem& p, DType dtype, const HostTensor<const double>& q,
                              const HostTensor<const double>& k, const HostTensor<const double>& v,
                              const HostTensor<const double>& o, const double* lse,
                              const HostTensor<const double>& dout, const HostTensor<double>& dq,
                              const HostTensor<double>& dk, const HostTensor<double>& dv,
                              double* d_sinks = nullptr);

/// Direct loops, no Eigen: the check of forward().
void forward_loops(const Problem& p, const HostTensor<const double>& q, const HostTensor<const double>& k,
                   const HostTensor<const double>& v, const HostTensor<double>& o, double* lse);

/// FlashAttention's blocked algorithm (queries in blocks of block_m, keys in blocks of block_n, online
/// softmax with running max and sum, rescaled accumulator, exp2 with the scale folded in), in double.
void forward_tiled(const Problem& p, int block_m, int block_n, const HostTensor<const double>& q,
                   const HostTensor<const double>& k, const HostTensor<const double>& v,
                   const HostTensor<double>& o, double* lse);

/// The same computation at the kernel's input precision, for one (batch, head): fp32 arithmetic
/// throughout, inputs taken as given (already representable in dtype), the output rounded to dtype. For fp16
/// and bf16 the unnormalized probabilities P are also rounded to dtype before the P V product (a tensor-core
/// MMA's operand type); their fp32 row sum (with a sink's term) is taken before that rounding. lse is
/// computed in fp32, and so are the variants' scores.
void forward_head_input_precision(const Problem& p, DType dtype, std::int64_t b, std::int64_t h,
                                  const HostTensor<const double>& q, const HostTensor<const double>& k,
                                  const HostTensor<const double>& v, const HostTensor<double>& o,
                                  double* lse);

/// Round-to-nearest-even conversions matching the device's.
std::uint16_t float_to_half_bits(float x);
float half_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16_bits(float x);
float bf16_bits_to_float(std::uint16_t bits);
/// x rounded to dtype and back to double.
double round_to(DType dtype, double x);

/// The tolerance rule every kernel is held to: the kernel's max abs error against the double reference must be at most
/// twice the error of the input-precision reference plus abs_floor * max|reference|. NaN or Inf never passes
/// unless the reference has it at the same place (-inf lse).
struct Comparison {
  double max_abs_error = 0;        ///< kernel vs double reference
  double budget_abs_error = 0;     ///< input-precision reference vs double reference
  double allowed = 0;              ///< 2 * budget + abs_floor * max(max|ref|, floor_magnitude)
  double max_abs_reference = 0;
  std::int64_t worst_index = -1;   ///< where max_abs_error is
  std::int64_t non_finite = 0;     ///< NaN/Inf in got where the reference is finite (or mismatched infinities)
  std::int64_t count = 0;
  bool pass = false;
  std::string summary() const;     ///< one line with the numbers above
};
/// got, ref, ref_input_precision: n values each in the same order. floor_magnitude: the magnitude the floor is
/// relative to when it exceeds max|ref| (gradients: the largest of the problem's gradients, since dQ and dK
/// can cancel to zero while the terms that cancel, and their rounding, are as large as dV).
Comparison compare(const double* got, const double* ref, const double* ref_input_precision, std::int64_t n,
                   double abs_floor = 1e-6, double floor_magnitude = 0);

/// The tolerance rule on a forward's outputs (compare() with abs_floor), the floor scaled by what each output
/// is computed from rather than by its own size: o is a weighted mean of v, so its rounding follows max|v|
/// even where the mean cancels to near 0; lse is a log, whose error is absolute (a relative error of the
/// softmax sum), so its floor follows max(1, max|lse|). A row with one visible key has lse = its scaled
/// score, which can lie near 0 while the score's fp32 rounding stays the size of its terms. v: the values o
/// averages (their largest finite magnitude is the floor's).
Comparison compare_forward_o(const double* got, const double* ref, const double* ref_input_precision,
                             std::int64_t n, const std::vector<double>& v, double abs_floor = 1e-6);
Comparison compare_forward_lse(const double* got, const double* ref, const double* ref_input_precision,
                               std::int64_t n, double abs_floor = 1e-6);

/// dQ, dK and dV of one problem, each in one order shared by every set compared.
struct Gradients {
  std::vector<double> dq, dk, dv;
};
/// The tolerance rule on each gradient (compare() with abs_floor), the floor relative to the largest finite
/// value of the three reference gradients: with one visible key dQ and dK cancel to exactly 0, while the
/// kernel's dP and D, summed in different orders, leave a rounding residue of the size of dV's terms.
struct GradientComparison {
  Comparison dq, dk, dv;
  bool pass() const { return dq.pass && dk.pass && dv.pass; }
  std::string summary() const;  ///< three lines, "dq: <Comparison::summary()>" ..., joined by newlines
};
/// Throws std::invalid_argument when a gradient's sizes differ between the three sets.
GradientComparison compare_gradients(const Gradients& got, const Gradients& ref,
                                     const Gradients& ref_input_precision, double abs_floor = 1e-6);

}  // namespace flashrtc::reference

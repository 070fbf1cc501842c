#pragma once
/// CPU reference of the variable-length (packed) forward and backward (docs/varlen.md): each sequence is a
/// dense problem of batch 1 on its slice of the packed tensors, handed to forward_head (or its
/// input-precision variant), so varlen shares the dense reference's math.
#include <cstdint>
#include <optional>
#include <vector>

#include "flashrtc_reference/attention_reference.hpp"

namespace flashrtc::reference {

/// Shapes, options and the host copy of the sequence boundaries of one varlen call.
struct VarlenProblem {
  std::vector<std::int32_t> cu_seqlens_q, cu_seqlens_k;  ///< [B + 1] prefix sums each
  std::vector<std::int32_t> seqused_k;                   ///< [B], or empty: every key of a sequence is used
  std::int64_t heads_q = 1, heads_kv = 1, head_dim = 64;
  MaskKind mask = MaskKind::kNone;
  std::optional<double> scale;  ///< unset: 1/sqrt(head_dim)
  /// The variants (Problem's), counted from each sequence's start with its own lengths: window bounds,
  /// softcap, ALiBi slopes ([heads_q], or [batch * heads_q]: per sequence), sinks ([heads_q]).
  std::int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> alibi_slopes;
  std::vector<double> sinks;
  /// Rows of q and o (the call's total_q, lse's stride between heads); 0: cu_seqlens_q's last entry. A call
  /// may hold rows after its last sequence.
  std::int64_t rows_q = 0;

  std::int64_t batch() const { return static_cast<std::int64_t>(cu_seqlens_q.size()) - 1; }
  std::int64_t total_q() const { return rows_q > 0 ? rows_q : cu_seqlens_q.back(); }
  std::int64_t total_k() const { return cu_seqlens_k.back(); }
  std::int64_t length_q(std::int64_t b) const;
  /// Keys sequence b attends: its range of cu_seqlens_k, or seqused_k[b] where given.
  std::int64_t length_k(std::int64_t b) const;
  /// The dense problem of sequence b (batch 1, with its slopes); its extents may be 0.
  Problem sequence_problem(std::int64_t b) const;
};

/// The varlen forward on host data: q, o [total_q, Hq, d]; k, v [total_k, Hkv, d] (stride_batch ignored); lse
/// [Hq, total_q] contiguous (nullable). Masks count from each sequence's own start; a row with no visible key
/// (Nk = 0 included) gets o = 0, lse = -inf (sinks[h] with sinks). Rows outside every sequence are not
/// written. input_precision: the kernel's input-precision computation in that dtype, else the double
/// reference. Throws std::invalid_argument when B < 1, cu_seqlens_q and cu_seqlens_k differ in size or are
/// not non-decreasing from 0 (nor past rows_q where set), seqused_k has not B entries in [0, length], or an
/// extent of the heads is invalid.
void forward_varlen(const VarlenProblem& p, const HostTensor<const double>& q,
                    const HostTensor<const double>& k, const HostTensor<const double>& v,
                    const HostTensor<double>& o, double* lse,
                    std::optional<DType> input_precision = std::nullopt);

/// The varlen backward on host data: the dense reference backward (backward, or backward_input_precision's
/// per-group computation in that dtype) on each sequence's slice, given the forward's o and lse [Hq, total_q]
/// and dout like o; dq like q, dk and dv like k. Written: dq rows of each sequence's queries (0 where the
/// sequence has no keys), dk and dv rows of every key each sequence owns in cu_seqlens_k, 0 for those past
/// seqused_k and for every key of a sequence without queries or keys. Rows outside every sequence are not
/// written. With sinks, d_sinks ([Hq], nullable) is overwritten with their gradient summed over the
/// sequences. Throws std::invalid_argument as forward_varlen does.
void backward_varlen(const VarlenProblem& p, const HostTensor<const double>& q,
                     const HostTensor<const double>& k, const HostTensor<const double>& v,
                     const HostTensor<const double>& o, const double* lse,
                     const HostTensor<const double>& dout, const HostTensor<double>& dq,
                     const HostTensor<double>& dk, const HostTensor<double>& dv,
                     std::optional<DType> input_precision = std::nullopt, double* d_sinks = nullptr);

}  // namespace flashrtc::reference

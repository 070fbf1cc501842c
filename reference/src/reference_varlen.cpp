// The varlen forward and backward on host data: every sequence is run through the dense reference on its
// slice.
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashrtc_reference/varlen_reference.hpp"

namespace flashrtc::reference {

namespace {

void check_prefix_sums(const std::vector<std::int32_t>& cu, const char* name) {
  if (cu.front() != 0) throw std::invalid_argument(std::string("reference: ") + name + "[0] must be 0");
  for (std::size_t i = 1; i < cu.size(); ++i)
    if (cu[i] < cu[i - 1])
      throw std::invalid_argument(std::string("reference: ") + name + " must not decrease");
}

void check(const VarlenProblem& p) {
  if (p.cu_seqlens_q.size() < 2 || p.cu_seqlens_k.size() != p.cu_seqlens_q.size())
    throw std::invalid_argument(
        "reference: cu_seqlens_q and cu_seqlens_k must hold batch + 1 >= 2 entries each");
  check_prefix_sums(p.cu_seqlens_q, "cu_seqlens_q");
  check_prefix_sums(p.cu_seqlens_k, "cu_seqlens_k");
  if (p.rows_q < 0 || (p.rows_q > 0 && p.cu_seqlens_q.back() > p.rows_q))
    throw std::invalid_argument("reference: cu_seqlens_q's sequences must lie within rows_q");
  if (p.heads_q < 1 || p.heads_kv < 1 || p.head_dim < 1 || p.heads_q % p.heads_kv != 0)
    throw std::invalid_argument("reference: heads_q must be a positive multiple of heads_kv, head_dim >= 1");
  // The other variants are checked with each sequence's Problem; the slopes' size is the call's.
  const auto slopes = static_cast<std::int64_t>(p.alibi_slopes.size());
  if (slopes != 0 && slopes != p.heads_q && slopes != p.batch() * p.heads_q)
    throw std::invalid_argument("reference: alibi_slopes must hold heads_q or batch * heads_q values");
  if (!p.seqused_k.empty()) {
    if (static_cast<std::int64_t>(p.seqused_k.size()) != p.batch())
      throw std::invalid_argument("reference: seqused_k must hold batch entries");
    for (std::int64_t b = 0; b < p.batch(); ++b) {
      const std::int32_t used = p.seqused_k[static_cast<std::size_t>(b)];
      if (used < 0 || used > p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b])
        throw std::invalid_argument("reference: seqused_k[b] must lie in [0, the sequence's keys]");
    }
  }
}

// The rows [start, ...) of a packed tensor as a batch-1 tensor.
template <typename T>
HostTensor<T> slice(const HostTensor<T>& t, std::int64_t start) {
  return {t.data + start * t.stride_seq, 0, t.stride_seq, t.stride_head, t.stride_dim};
}

}  // namespace

std::int64_t VarlenProblem::length_q(std::int64_t b) const {
  return cu_seqlens_q.at(static_cast<std::size_t>(b + 1)) - cu_seqlens_q.at(static_cast<std::size_t>(b));
}

std::int64_t VarlenProblem::length_k(std::int64_t b) const {
  if (!seqused_k.empty()) return seqused_k.at(static_cast<std::size_t>(b));
  return cu_seqlens_k.at(static_cast<std::size_t>(b + 1)) - cu_seqlens_k.at(static_cast<std::size_t>(b));
}

Problem VarlenProblem::sequence_problem(std::int64_t b) const {
  Problem r;
  r.batch = 1;
  r.seqlen_q = length_q(b);
  r.seqlen_kv = length_k(b);
  r.heads_q = heads_q;
  r.heads_kv = heads_kv;
  r.head_dim = head_dim;
  r.mask = mask;
  r.scale = scale;
  r.window_left = window_left;
  r.window_right = window_right;
  r.softcap = softcap;
  r.sinks = sinks;
  if (static_cast<std::int64_t>(alibi_slopes.size()) == heads_q) {
    r.alibi_slopes = alibi_slopes;
  } else if (!alibi_slopes.empty()) {  // [batch, heads_q]: sequence b's row
    const auto row = alibi_slopes.begin() + b * heads_q;
    r.alibi_slopes.assign(row, row + heads_q);
  }
  return r;
}

void forward_varlen(const VarlenProblem& p, const HostTensor<const double>& q,
                    const HostTensor<const double>& k, const HostTensor<const double>& v,
                    const HostTensor<double>& o, double* lse, std::optional<DType> input_precision) {
  check(p);
  const std::int64_t total_q = p.total_q();
  std::vector<double> lse_rows;
  for (std::int64_t b = 0; b < p.batch(); ++b) {
    const Problem sp = p.sequence_problem(b);
    const std::int64_t start_q = p.cu_seqlens_q[static_cast<std::size_t>(b)];
    if (sp.seqlen_q == 0) continue;
    const HostTensor<double> o_b = slice(o, start_q);
    if (sp.seqlen_kv ==
        0) {  // the dense reference takes no empty key set: the softmax of none is zero weights
      for (std::int64_t i = 0; i < sp.seqlen_q; ++i)
        for (std::int64_t h = 0; h < p.heads_q; ++h) {
          for (std::int64_t d = 0; d < p.head_dim; ++d) o_b.at(0, i, h, d) = 0.0;
          if (lse)
            lse[h * total_q + start_q + i] = p.sinks.empty() ? -std::numeric_limits<double>::infinity()
                                                             : p.sinks[static_cast<std::size_t>(h)];
        }
      continue;
    }
    const std::int64_t start_k = p.cu_seqlens_k[static_cast<std::size_t>(b)];
    const HostTensor<const double> q_b = slice(q, start_q), k_b = slice(k, start_k), v_b = slice(v, start_k);
    lse_rows.assign(static_cast<std::size_t>(p.heads_q * sp.seqlen_q), 0.0);
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      if (input_precision)
        forward_head_input_precision(sp, *input_precision, 0, h, q_b, k_b, v_b, o_b, lse_rows.data());
      else
        forward_head(sp, 0, h, q_b, k_b, v_b, o_b, lse_rows.data());
      if (lse)
        for (std::int64_t i = 0; i < sp.seqlen_q; ++i)
          lse[h * total_q + start_q + i] = lse_rows[static_cast<std::size_t>(h * sp.seqlen_q + i)];
    }
  }
}

void backward_varlen(const VarlenProblem& p, const HostTensor<const double>& q,
                     const HostTensor<const double>& k, const HostTensor<const double>& v,
                     const HostTensor<const double>& o, const double* lse,
                     const HostTensor<const double>& dout, const HostTensor<double>& dq,
                     const HostTensor<double>& dk, const HostTensor<double>& dv,
                     std::optional<DType> input_precision, double* d_sinks) {
  check(p);
  if (!lse) throw std::invalid_argument("reference: the backward needs the forward's lse");
  const std::int64_t total_q = p.total_q();
  // Each sequence's sinks gradient, added in sequence order. A sequence without keys adds none: its rows
  // have o = 0, so D = 0.
  const bool sinks = d_sinks && !p.sinks.empty();
  if (sinks) std::fill(d_sinks, d_sinks + p.heads_q, 0.0);
  std::vector<double> d_sinks_seq(sinks ? static_cast<std::size_t>(p.heads_q) : 0);
  std::vector<double> lse_rows;
  for (std::int64_t b = 0; b < p.batch(); ++b) {
    const Problem sp = p.sequence_problem(b);
    const std::int64_t start_q = p.cu_seqlens_q[static_cast<std::size_t>(b)];
    const std::int64_t start_k = p.cu_seqlens_k[static_cast<std::size_t>(b)];
    const std::int64_t key_rows = p.cu_seqlens_k[static_cast<std::size_t>(b + 1)] - start_k;
    const HostTensor<double> dq_b = slice(dq, start_q), dk_b = slice(dk, start_k), dv_b = slice(dv, start_k);
    // Every key the sequence owns starts at 0: the dense backward below covers its first seqlen_kv; the rest
    // (past seqused_k) no query sees.
    for (std::int64_t j = 0; j < key_rows; ++j)
      for (std::int64_t h = 0; h < p.heads_kv; ++h)
        for (std::int64_t d = 0; d < p.head_dim; ++d) dk_b.at(0, j, h, d) = dv_b.at(0, j, h, d) = 0.0;
    if (sp.seqlen_q == 0) continue;
    // No key: o = 0 whatever q, so dQ = 0 (the dense reference takes no empty key set).
    if (sp.seqlen_kv == 0) {
      for (std::int64_t i = 0; i < sp.seqlen_q; ++i)
        for (std::int64_t h = 0; h < p.heads_q; ++h)
          for (std::int64_t d = 0; d < p.head_dim; ++d) dq_b.at(0, i, h, d) = 0.0;
      continue;
    }
    // The sequence's lse in the dense layout [1, Hq, Lq].
    lse_rows.assign(static_cast<std::size_t>(p.heads_q * sp.seqlen_q), 0.0);
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < sp.seqlen_q; ++i)
        lse_rows[static_cast<std::size_t>(h * sp.seqlen_q + i)] = lse[h * total_q + start_q + i];
    const HostTensor<const double> q_b = slice(q, start_q), k_b = slice(k, start_k), v_b = slice(v, start_k),
                                   o_b = slice(o, start_q), dout_b = slice(dout, start_q);
    double* seq_sinks = sinks ? d_sinks_seq.data() : nullptr;
    if (input_precision) {
      std::fill(d_sinks_seq.begin(), d_sinks_seq.end(), 0.0);
      for (std::int64_t hk = 0; hk < p.heads_kv; ++hk)
        backward_group_input_precision(sp, *input_precision, 0, hk, q_b, k_b, v_b, o_b, lse_rows.data(),
                                       dout_b, dq_b, dk_b, dv_b, seq_sinks);
    } else {
      backward(sp, q_b, k_b, v_b, o_b, lse_rows.data(), dout_b, dq_b, dk_b, dv_b, seq_sinks);
    }
    for (std::size_t h = 0; h < d_sinks_seq.size(); ++h) d_sinks[h] += d_sinks_seq[h];
  }
}

}  // namespace flashrtc::reference

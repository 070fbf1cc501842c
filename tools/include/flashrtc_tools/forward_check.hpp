#pragma once
// `flashrtc run --check`: the kernel's o and lse against the double reference for a sample of
// (batch, head) pairs, by the tolerance rule (flashrtc_reference::Comparison), plus a scan for outputs the kernel never wrote.
#include <cstdint>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "flashrtc/flashrtc.hpp"

namespace flashrtc::tools {

class ForwardCheck {
 public:
  /// Picks the (batch, head) pairs to check: all of them when the reference work is small, else at most
  /// four, always the first and the last.
  explicit ForwardCheck(const ForwardParams& params);

  std::int64_t head_count() const { return static_cast<std::int64_t>(samples_.size()); }

  /// Keeps the rows the sampled heads need from an input tensor (bytes in params.dtype, laid out as
  /// layout's strides describe), so the whole tensor need not stay on the host.
  void take_q(const unsigned char* bytes, const TensorRef& layout);
  void take_k(const unsigned char* bytes, const TensorRef& layout);
  void take_v(const unsigned char* bytes, const TensorRef& layout);

  /// Compares the kernel's outputs (o bytes as laid out by layout; lse [B, Hq, Nq]) and prints one summary
  /// per checked head and the verdict to out (nothing when out is null). True on PASS.
  bool verify(const unsigned char* o_bytes, const TensorRef& o_layout, const std::vector<float>& lse,
              std::FILE* out = stdout) const;

 private:
  using HeadKey = std::pair<std::int64_t, std::int64_t>;  // (batch, head)
  ForwardParams params_;
  std::vector<HeadKey> samples_;
  void take_kv(const unsigned char* bytes, const TensorRef& layout,
               std::map<HeadKey, std::vector<double>>& rows);
  std::map<HeadKey, std::vector<double>> q_rows_, k_rows_, v_rows_;
};

}  // namespace flashrtc::tools

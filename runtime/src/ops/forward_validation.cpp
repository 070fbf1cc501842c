// Argument checks of attention_forward: every rule names the argument and its value, and runs before
// anything touches the device.
#include "ops/forward_validation.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

#include "flashrtc/error.hpp"
#include "flashrtc/kernel_family.hpp"
#include "ops/variants_validation.hpp"

namespace flashrtc {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

std::string pointer_text(const void* p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

void check_positive(const char* name, std::int64_t value, std::int64_t max = std::numeric_limits<std::int32_t>::max()) {
  if (value <= 0) invalid(std::string(name) + "=" + std::to_string(value) + ": must be >= 1");
  // The kernels index rows and heads with 32-bit integers.
  if (value > max) invalid(std::string(name) + "=" + std::to_string(value) + ": index overflow, must be <= " + std::to_string(max));
}

// |a * b| without overflow, saturating: the extent checks only need to know "too large".
__int128 extent(std::int64_t count, std::int64_t stride) { return static_cast<__int128>(count - 1) * stride; }

}  // namespace

namespace detail {

void check_tensor(const char* n, const TensorRef& t, std::int64_t seqlen, std::int64_t heads, std::int64_t batch,
                  std::int64_t head_dim, std::size_t elem) {
  if (!t.data) invalid(std::string(n) + ".data is null");
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0)
    invalid(std::string(n) + ".data=" + pointer_text(t.data) + ": must be 16-byte aligned (the kernels read 16-byte vectors)");
  if (t.stride_dim != 1) invalid(std::string(n) + ".stride_dim=" + std::to_string(t.stride_dim) + ": the head dim must be contiguous (1)");
  const std::pair<const char*, std::int64_t> strides[] = {
      {"stride_batch", t.stride_batch}, {"stride_seq", t.stride_seq}, {"stride_head", t.stride_head}};
  for (const auto& [field, stride] : strides) {
    if (stride < 0) invalid(std::string(n) + "." + field + "=" + std::to_string(stride) + ": must be >= 0");
    if ((static_cast<__int128>(stride) * static_cast<__int128>(elem)) % 16 != 0)
      invalid(std::string(n) + "." + field + "=" + std::to_string(stride) + ": must be a multiple of " + std::to_string(16 / elem) +
              " elements (16 bytes) so every row stays 16-byte aligned");
  }
  const __int128 last = extent(batch, t.stride_batch) + extent(seqlen, t.stride_seq) + extent(heads, t.stride_head) + head_dim;
  if (last * static_cast<__int128>(elem) > static_cast<__int128>(std::numeric_limits<std::int64_t>::max()))
    invalid(std::string(n) + ": strides x sizes overflow a 64-bit byte offset (index overflow)");
}

void check_forward_arguments(const ForwardParams& p) {
  if (p.dtype != DType::kFloat32 && p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    invalid("dtype=" + std::to_string(static_cast<int>(p.dtype)) + ": must be fp32, fp16 or bf16");
  if (p.mask != MaskKind::kNone && p.mask != MaskKind::kCausalTopLeft && p.mask != MaskKind::kCausalBottomRight)
    invalid("mask=" + std::to_string(static_cast<int>(p.mask)) + ": must be none, causal or causal-br");
  check_positive("batch", p.batch);
  check_positive("seqlen_q", p.seqlen_q);
  check_positive("seqlen_kv", p.seqlen_kv);
  check_positive("heads_q", p.heads_q);
  check_positive("heads_kv", p.heads_kv);
  if (!is_supported_head_dim(static_cast<int>(std::min<std::int64_t>(p.head_dim, 1 << 20))))
    invalid("head_dim=" + std::to_string(p.head_dim) + ": must be a multiple of 8 from 8 to " + std::to_string(kMaxHeadDim));
  if (p.heads_q % p.heads_kv != 0)
    invalid("heads_q=" + std::to_string(p.heads_q) + " is not a multiple of heads_kv=" + std::to_string(p.heads_kv));
  if (p.softmax_scale && !std::isfinite(*p.softmax_scale))
    invalid("softmax_scale=" + std::to_string(*p.softmax_scale) + ": must be finite");

  const std::size_t elem = dtype_size(p.dtype);
  check_tensor("q", p.q, p.seqlen_q, p.heads_q, p.batch, p.head_dim, elem);
  check_tensor("k", p.k, p.seqlen_kv, p.heads_kv, p.batch, p.head_dim, elem);
  check_tensor("v", p.v, p.seqlen_kv, p.heads_kv, p.batch, p.head_dim, elem);
  check_tensor("o", p.o, p.seqlen_q, p.heads_q, p.batch, p.head_dim, elem);
  if (p.lse && reinterpret_cast<std::uintptr_t>(p.lse) % alignof(float) != 0)
    invalid("lse=" + pointer_text(p.lse) + ": must be 4-byte aligned");
  const __int128 lse_elems = static_cast<__int128>(p.batch) * p.heads_q * p.seqlen_q;
  if (lse_elems * 4 > static_cast<__int128>(std::numeric_limits<std::int64_t>::max()))
    invalid("batch * heads_q * seqlen_q overflows a 64-bit index (index overflow)");
  check_variants(p.variants, p.heads_q);
}

void validate_forward_arguments(const ForwardParams& p) {
  check_forward_arguments(p);
  require_served_variants(p.variants, Operation::kForward);
}

}  // namespace detail

void validate_forward(const ForwardParams& p) {
  detail::validate_forward_arguments(p);
  if (p.config) {
    const std::string reason = check_config_any_family(Operation::kForward, p.dtype, static_cast<int>(p.head_dim),
                                                       *p.config, kSmemBytesSm90);
    if (!reason.empty()) invalid("config: " + reason);
  }
}

}  // namespace flashrtc

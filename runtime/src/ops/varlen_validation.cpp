// Argument checks of attention_varlen_forward and attention_varlen_backward: every rule names the argument
// and its value, and runs before anything touches the device. cu_seqlens_q, cu_seqlens_k and seqused_k live
// on the device: only their pointers are checked here; the kernel clamps every value it reads from them
// (docs/varlen.md).
#include "ops/varlen_validation.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "flashrtc/error.hpp"
#include "flashrtc/kernel_family.hpp"
#include "ops/forward_validation.hpp"
#include "ops/variants_validation.hpp"

namespace flashrtc::detail {

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

std::string value_text(const char* name, std::int64_t value) {
  return std::string(name) + "=" + std::to_string(value);
}

// lo <= value <= hi, where hi is another field (named) or the kernels' 32-bit index limit.
void check_range(const char* name, std::int64_t value, std::int64_t lo, std::int64_t hi,
                 const std::string& hi_text) {
  if (value < lo) invalid(value_text(name, value) + ": must be >= " + std::to_string(lo));
  if (value > hi) invalid(value_text(name, value) + ": must be <= " + hi_text);
}

// A packed tensor is one batch: its stride_batch is never used, so only its rows, heads and dims are checked.
void check_packed(const char* name, const TensorRef& t, std::int64_t rows, std::int64_t heads,
                  std::int64_t head_dim, std::size_t elem) {
  TensorRef one_batch = t;
  one_batch.stride_batch = 0;
  check_tensor(name, one_batch, std::max<std::int64_t>(rows, 1), heads, 1, head_dim, elem);
}

void check_int32_array(const char* name, const std::int32_t* p, bool required, const char* extent) {
  if (!p) {
    if (required)
      invalid(std::string(name) + " is null: it must point to " + extent + " int32 on the device");
    return;
  }
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(std::int32_t) != 0)
    invalid(std::string(name) + ": must be 4-byte aligned (" + extent + " int32 on the device)");
}

// The forward's rules, the variants' values included, without asking whether a kernel serves them.
void check_varlen_arguments(const VarlenForwardParams& p) {
  if (p.dtype != DType::kFloat32 && p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    invalid("dtype=" + std::to_string(static_cast<int>(p.dtype)) + ": must be fp32, fp16 or bf16");
  if (p.mask != MaskKind::kNone && p.mask != MaskKind::kCausalTopLeft &&
      p.mask != MaskKind::kCausalBottomRight)
    invalid("mask=" + std::to_string(static_cast<int>(p.mask)) + ": must be none, causal or causal-br");
  constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
  const std::string int32_limit = std::to_string(kInt32Max) + " (index overflow: cu_seqlens are int32)";
  // batch + 1 prefix sums are int32 entries, indexed by a 32-bit sequence number.
  check_range("batch", p.batch, 1, kInt32Max - 1, std::to_string(kInt32Max - 1) + " (index overflow)");
  check_range("total_q", p.total_q, 1, kInt32Max, int32_limit);
  check_range("total_k", p.total_k, 0, kInt32Max, int32_limit);
  check_range("max_seqlen_q", p.max_seqlen_q, 1, p.total_q,
              "total_q=" + std::to_string(p.total_q) + " (no sequence is longer than the packed queries)");
  check_range("max_seqlen_k", p.max_seqlen_k, 0, p.total_k,
              "total_k=" + std::to_string(p.total_k) + " (no sequence is longer than the packed keys)");
  check_range("heads_q", p.heads_q, 1, kInt32Max, std::to_string(kInt32Max) + " (index overflow)");
  check_range("heads_kv", p.heads_kv, 1, kInt32Max, std::to_string(kInt32Max) + " (index overflow)");
  if (!is_supported_head_dim(
          static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(p.head_dim, 0), 1 << 20))))
    invalid(value_text("head_dim", p.head_dim) + ": must be a multiple of 8 from 8 to " +
            std::to_string(kMaxHeadDim));
  if (p.heads_q % p.heads_kv != 0)
    invalid(value_text("heads_q", p.heads_q) +
            " is not a multiple of heads_kv=" + std::to_string(p.heads_kv));
  if (p.softmax_scale && !std::isfinite(*p.softmax_scale))
    invalid("softmax_scale=" + std::to_string(*p.softmax_scale) + ": must be finite");

  check_int32_array("cu_seqlens_q", p.cu_seqlens_q, true, "batch + 1");
  check_int32_array("cu_seqlens_k", p.cu_seqlens_k, true, "batch + 1");
  check_int32_array("seqused_k", p.seqused_k, false, "batch");

  const std::size_t elem = dtype_size(p.dtype);
  check_packed("q", p.q, p.total_q, p.heads_q, p.head_dim, elem);
  check_packed("k", p.k, p.total_k, p.heads_kv, p.head_dim, elem);
  check_packed("v", p.v, p.total_k, p.heads_kv, p.head_dim, elem);
  check_packed("o", p.o, p.total_q, p.heads_q, p.head_dim, elem);
  if (p.lse && reinterpret_cast<std::uintptr_t>(p.lse) % alignof(float) != 0)
    invalid("lse: must be 4-byte aligned ([heads_q, total_q] float32)");
  const __int128 lse_elems = static_cast<__int128>(p.heads_q) * p.total_q;
  if (lse_elems * 4 > static_cast<__int128>(std::numeric_limits<std::int64_t>::max()))
    invalid("heads_q * total_q overflows a 64-bit index (index overflow)");
  check_variants(p.variants, p.heads_q);
}

}  // namespace

void validate_varlen_arguments(const VarlenForwardParams& p) {
  check_varlen_arguments(p);
  require_served_variants(p.variants, Operation::kForwardVarlen);
}

VarlenForwardParams forward_of(const VarlenBackwardParams& p) {
  VarlenForwardParams f;
  f.dtype = p.dtype;
  f.batch = p.batch;
  f.total_q = p.total_q;
  f.total_k = p.total_k;
  f.max_seqlen_q = p.max_seqlen_q;
  f.max_seqlen_k = p.max_seqlen_k;
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim = p.head_dim;
  f.q = p.q;
  f.k = p.k;
  f.v = p.v;
  f.o = p.o;
  f.cu_seqlens_q = p.cu_seqlens_q;
  f.cu_seqlens_k = p.cu_seqlens_k;
  f.seqused_k = p.seqused_k;
  f.lse = const_cast<float*>(p.lse);  // read only: the forward's checks of it
  f.softmax_scale = p.softmax_scale;
  f.mask = p.mask;
  f.variants = p.variants;
  f.stream = p.stream;
  f.config = p.config;
  return f;
}

void validate_varlen_backward_arguments(const VarlenBackwardParams& p) {
  check_varlen_arguments(forward_of(p));
  if (!p.lse)
    invalid(
        "lse is null: the backward needs the forward's lse ([heads_q, total_q] float32; run the forward "
        "with lse set)");
  const std::size_t elem = dtype_size(p.dtype);
  check_packed("d_o", p.d_o, p.total_q, p.heads_q, p.head_dim, elem);
  check_packed("d_q", p.d_q, p.total_q, p.heads_q, p.head_dim, elem);
  check_packed("d_k", p.d_k, p.total_k, p.heads_kv, p.head_dim, elem);
  check_packed("d_v", p.d_v, p.total_k, p.heads_kv, p.head_dim, elem);
  check_variants(p.variants, p.heads_q, p.d_sinks);
  require_served_variants(p.variants, Operation::kBackwardVarlen);
}

}  // namespace flashrtc::detail

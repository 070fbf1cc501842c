// The attention variants' argument checks, one implementation for the dense, varlen and KV-cache calls.
#include "ops/variants_validation.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

void check_aligned(const char* name, const float* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(float) != 0) {
    std::ostringstream s;
    s << name << "=" << static_cast<const void*>(p) << ": must be 4-byte aligned (float32 on the device)";
    invalid(s.str());
  }
}

void check_window(const char* name, std::int64_t value) {
  if (value < -1)
    invalid(std::string("variants.") + name + "=" + std::to_string(value) +
            ": must be >= 0 (keys on that side of the diagonal) or -1 (unbounded)");
}

}  // namespace

void check_variants(const AttentionVariants& v, std::int64_t heads_q) {
  check_window("window_left", v.window_left);
  check_window("window_right", v.window_right);
  if (!std::isfinite(v.softcap) || v.softcap < 0.f) {
    std::ostringstream s;
    s << "variants.softcap=" << v.softcap << ": must be finite and >= 0 (0: no softcap)";
    invalid(s.str());
  }
  if (!v.alibi_slopes && v.alibi_stride_batch != 0)
    invalid("variants.alibi_stride_batch=" + std::to_string(v.alibi_stride_batch) +
            ": must be 0 without alibi_slopes");
  if (v.alibi_stride_batch != 0 && v.alibi_stride_batch < heads_q)
    invalid("variants.alibi_stride_batch=" + std::to_string(v.alibi_stride_batch) +
            ": must be 0 (slopes [heads_q] for every batch) or >= heads_q=" + std::to_string(heads_q) +
            " (slopes [batch, heads_q])");
  check_aligned("variants.alibi_slopes", v.alibi_slopes);
  check_aligned("variants.sinks", v.sinks);
}

void check_variants(const AttentionVariants& v, std::int64_t heads_q, const float* d_sinks) {
  check_variants(v, heads_q);
  if (v.sinks && !d_sinks)
    invalid("d_sinks is null: a backward with variants.sinks writes their gradient ([heads_q] float32)");
  if (!v.sinks && d_sinks)
    invalid("d_sinks is set without variants.sinks: there is no sink gradient to write");
  check_aligned("d_sinks", d_sinks);
}

void require_served_variants(const AttentionVariants& v, Operation op) {
  // A variant that no family of op computes is refused by name rather than run without it; one that some
  // family computes is left to family selection, which passes over the families that do not (and names the
  // variant where none of them serves the call's arch, dtype and head dim).
  const unsigned asked = variant_bits(v);
  if (asked == 0) return;  // the common call: no scan of the family table
  // The built-in table is fixed: the union per operation is made once.
  static const std::vector<unsigned> served_by_op = [] {
    std::vector<unsigned> served;
    for (const KernelFamily* family : kernel_families()) {
      const std::size_t index = static_cast<std::size_t>(family->operation);
      if (index >= served.size()) served.resize(index + 1, 0u);
      served[index] |= family->serves_variants;
    }
    return served;
  }();
  const std::size_t index = static_cast<std::size_t>(op);
  const unsigned served = index < served_by_op.size() ? served_by_op[index] : 0u;
  const auto refuse = [op](const std::string& what) {
    throw Error(ErrorCode::kUnsupported, what + ": no " + to_string(op) +
                                             " kernel serves this attention variant yet (docs/variants.md)");
  };
  const unsigned missing = asked & ~served;
  if (missing & kVariantWindow)
    refuse("sliding window (window_left=" + std::to_string(v.window_left) +
           ", window_right=" + std::to_string(v.window_right) + ")");
  if (missing & kVariantSoftcap) {
    std::ostringstream s;
    s << "softcap=" << v.softcap;
    refuse(s.str());
  }
  if (missing & kVariantAlibi) refuse("ALiBi (alibi_slopes)");
  if (missing & kVariantSinks) refuse("attention sinks (sinks)");
}

}  // namespace flashrtc::detail

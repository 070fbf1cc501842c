#pragma once
// The checks of a call's attention variants (attention_variants.hpp), shared by every operation's
// validation: their values, and whether a kernel serves them.
#include <cstdint>

#include "flashrtc/attention_variants.hpp"
#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

// The values: windows >= -1, softcap finite and >= 0, alibi_stride_batch 0 or >= heads_q (and 0 without
// slopes), alibi_slopes and sinks 4-byte aligned. Throws Error(kInvalidArgument) naming the field.
void check_variants(const AttentionVariants& variants, std::int64_t heads_q);
// A backward's: the above, and d_sinks given (4-byte aligned) exactly when sinks are.
void check_variants(const AttentionVariants& variants, std::int64_t heads_q, const float* d_sinks);

// Throws Error(kUnsupported) naming the first variant that no kernel family of op serves
// (KernelFamily::serves_variants); family selection then picks one that serves the call's. Call after
// check_variants.
void require_served_variants(const AttentionVariants& variants, Operation op);

}  // namespace flashrtc::detail

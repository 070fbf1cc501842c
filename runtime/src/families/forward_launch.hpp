#pragma once
// The launch of the forward families that share kernel::ForwardParams (forward_params.cuh) and
// ForwardBlock's grid (forward_block.cuh): one thread block per (batch, head, query block).
#include "flashrtc/attention_params.hpp"
#include "flashrtc/forward_params.cuh"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/varlen_params.hpp"

namespace flashrtc::detail {

// The kernels' parameters for a call: one work tile per (batch, head, query block).
// Throws Error(kInvalidArgument) when the tiles would exceed 2^31 - 1.
kernel::ForwardParams forward_kernel_params(const CallPlan& plan, const ForwardParams& p);

// Those parameters with the call's attention variants, for a kernel compiled with plan.spec.variants
// (docs/variants.md): windows clamped into int (a wider one is no window), the softcap as softcap_factors.
kernel::VariantForwardParams variant_forward_kernel_params(const CallPlan& plan, const ForwardParams& p);

// KernelFamily::build_launch for those families: one thread block per work tile (the parameters with the
// variants for a kernel compiled with some).
void build_forward_block_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args);

// The variable-length kernels' parameters for a packed call (docs/varlen.md): one work tile per (sequence,
// head, query block of max_seqlen_q). Throws Error(kInvalidArgument) when the tiles would exceed 2^31 - 1.
kernel::VarlenForwardParams varlen_forward_kernel_params(const CallPlan& plan, const VarlenForwardParams& p);

// KernelFamily::build_launch of the variable-length families (op_params: a VarlenForwardParams).
void build_varlen_forward_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape,
                                 KernelArgs& args);

}  // namespace flashrtc::detail

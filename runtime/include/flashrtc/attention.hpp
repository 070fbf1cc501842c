#pragma once
/// Forward attention: o = softmax(scale * q k^T + mask) v, per batch and query head.
#include "flashrtc/attention_params.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/varlen_params.hpp"

namespace flashrtc {

/// Validates params, compiles or fetches the specialization, and launches it on params.stream in the
/// current device's primary context (the CUDA runtime's and PyTorch's context). Asynchronous.
///
/// Needs: device pointers readable with 16-byte vectors: stride_dim == 1, every pointer 16-byte aligned,
/// other strides multiples of 16 bytes, all strides >= 0. Rows with no visible key get o = 0, lse = -inf.
/// Throws Error: kInvalidArgument naming the argument (nothing is launched, outputs untouched);
/// kUnsupported for an explicit config that cannot run; kNoDevice; kNvrtc; kDriver; kInvalidArgument or
/// kUnsupported naming FLASHRTC_CONFIG when that override is malformed or cannot run.
FLASHRTC_API void attention_forward(const ForwardParams& params);

/// Checks params as attention_forward does, without a device. Throws Error(kInvalidArgument).
FLASHRTC_API void validate_forward(const ForwardParams& params);

/// The specialization attention_forward would launch for params (validated): for the current device, or
/// for sm_80's shared memory when there is none.
FLASHRTC_API KernelSpec select_forward_spec(const ForwardParams& params);

/// FLOPs by the usual convention: 4 * B * Hq * Nq * Nk * d (two products of 2 * Nq * Nk * d each), halved
/// for a causal mask; with a sliding window, 4 * B * Hq * d times the (query, key) pairs the mask and the
/// window leave visible (the work a kernel that skips the rest does).
FLASHRTC_API double attention_flops(const ForwardParams& params);

/// The query of a call: what decides its family and tile (config_resolution.hpp).
FLASHRTC_API ConfigQuery config_query(const ForwardParams& params);

/// For a call: validates params, then resolves on the current device (no_device_target() without one).
FLASHRTC_API ConfigResolution resolve_config(const ForwardParams& params);
[[deprecated("renamed resolve_config")]] inline ConfigResolution resolve_forward_config(const ForwardParams& params) {
  return resolve_config(params);
}

/// The variable-length forward (varlen_params.hpp, docs/varlen.md): attention_forward per sequence of a packed
/// call, each mask counted from the sequence's own start. Asynchronous; graph-capturable for any device-side
/// lengths. Needs what attention_forward needs of q, k, v and o, and cu_seqlens_q, cu_seqlens_k (and
/// seqused_k) 4-byte aligned device pointers. Rows with no visible key get o = 0, lse = -inf; rows outside
/// every sequence are not written.
/// Throws Error: kInvalidArgument naming the argument (nothing is launched, outputs untouched); kUnsupported
/// where no family serves the call (fp16 and bf16 are served) or for an explicit config that cannot run;
/// kNoDevice; kNvrtc; kDriver.
FLASHRTC_API void attention_varlen_forward(const VarlenForwardParams& params);

/// Checks params as attention_varlen_forward does, without a device (and without reading the device arrays).
/// Throws Error(kInvalidArgument), or Error(kUnsupported) where no family serves the dtype and head dim.
FLASHRTC_API void validate_varlen_forward(const VarlenForwardParams& params);

/// The query of a call (Operation::kForwardVarlen): the tile is resolved from max_seqlen_q and max_seqlen_k.
FLASHRTC_API ConfigQuery config_query(const VarlenForwardParams& params);

/// For a call: validates params, then resolves on the current device (no_device_target() without one).
FLASHRTC_API ConfigResolution resolve_config(const VarlenForwardParams& params);

}  // namespace flashrtc

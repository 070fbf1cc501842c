#pragma once
/// Backward attention: given dO for o = softmax(scale * q k^T + mask) v, the gradients dQ, dK and dV
/// (FlashAttention-2's algorithm: P recomputed from q, k and the forward's lse).
#include <array>
#include <optional>
#include <string_view>

#include "flashrtc/attention.hpp"
#include "flashrtc/attention_params.hpp"
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/kernel_family.hpp"
#include "flashrtc/varlen_params.hpp"

namespace flashrtc {

/// Validates params, compiles or fetches the backward kernels, and launches them on params.stream in the
/// current device's primary context. Asynchronous; any workspace comes from stream-ordered scratch.
/// Same input rules as attention_forward, for every tensor. Throws Error as attention_forward does;
/// kInvalidArgument naming the tensor for one whose shape or strides do not fit (nothing launched).
FLASHRTC_API void attention_backward(const BackwardParams& params);

/// The operations of the kernels attention_backward launches for params on arch (empty: judged as sm_80) with
/// these CallTrait bits (a call's own: those of its tensors; a query without tensors: all of them), in
/// launch order: the pre-pass, then either the fused main kernel (kBackwardFused: dK, dV and dQ added into an
/// fp32 workspace) and the workspace's conversion (kBackwardDqConvert), or the main kernel (kBackward) and
/// the atomic-free dQ pass over query blocks (kBackwardDq). A non-deterministic call that a fused family
/// serves on arch takes the fused kernel when its explicit config is a tile that family takes, or, without
/// one, when it has at least 2048 keys (4096 under a causal mask; below, the two kernels measured as fast).
/// Each resolves its family and tile on its own.
FLASHRTC_API std::array<Operation, 3> backward_operations(const BackwardParams& params, std::string_view arch,
                                                          unsigned traits = kAllCallTraits);

/// The field of params holding the explicit tile of op's kernel: &config (kBackward, kBackwardFused),
/// &dq_config (kBackwardDq); null for the kernels that take none (the pre-pass, the fused kernel's
/// conversion, the forward).
FLASHRTC_API const std::optional<TileConfig>* explicit_tile(const BackwardParams& params, Operation op);
inline std::optional<TileConfig>* explicit_tile(BackwardParams& params, Operation op) {
  return const_cast<std::optional<TileConfig>*>(
      explicit_tile(static_cast<const BackwardParams&>(params), op));
}

/// Checks params as attention_backward does, without a device. Throws Error(kInvalidArgument).
FLASHRTC_API void validate_backward(const BackwardParams& params);

/// FLOPs by the usual convention: 2.5 times the forward's (attention_flops): five products of the forward's
/// size against its two.
FLASHRTC_API double attention_backward_flops(const BackwardParams& params);

/// The query of the kernel of a backward call that op names (one of backward_operations), with that kernel's
/// explicit tile from the call (explicit_tile: config for the main kernel, dq_config for the dQ pass).
FLASHRTC_API ConfigQuery config_query(const BackwardParams& params, Operation op);

/// The variable-length backward (varlen_params.hpp, docs/varlen.md): the gradients of
/// attention_varlen_forward as three kernels on params.stream (varlen_backward_operations), each over the
/// sequences as attention_backward's over a batch: the pre-pass D = rowsum(dO * O) over every packed row
/// (Operation::kBackwardPrep); then the fused main kernel (kBackwardFusedVarlen: varlen-bwd-wgmma-fused) and
/// its workspace's conversion (kBackwardDqConvertVarlen), or, deterministic, the main kernel for dK and dV
/// (kBackwardVarlen: varlen-bwd-mma, on sm_90a varlen-bwd-wgmma) and the dQ pass (kBackwardDqVarlen:
/// varlen-bwd-dq-mma, on sm_90a varlen-bwd-dq-wgmma). Asynchronous (D and the workspace in stream-ordered
/// scratch); graph-capturable for any device-side lengths. Throws Error: kInvalidArgument naming the argument
/// (nothing launched, outputs untouched); kUnsupported where no family serves the call (fp16 and bf16 on
/// sm_80 and newer) or for an explicit config that cannot run; kNoDevice; kNvrtc; kDriver.
FLASHRTC_API void attention_varlen_backward(const VarlenBackwardParams& params);

/// Checks params as attention_varlen_backward does, without a device (and without reading the device
/// arrays), the tiles config and dq_config included. Throws Error(kInvalidArgument), or Error(kUnsupported)
/// where no family serves the dtype and head dim.
FLASHRTC_API void validate_varlen_backward(const VarlenBackwardParams& params);

/// The operations of the kernels attention_varlen_backward launches for params on arch with these CallTrait
/// bits, in launch order, by backward_operations' rule with max_seqlen_k for the key length: kBackwardPrep,
/// then kBackwardFusedVarlen and kBackwardDqConvertVarlen, or kBackwardVarlen and kBackwardDqVarlen.
FLASHRTC_API std::array<Operation, 3> varlen_backward_operations(const VarlenBackwardParams& params,
                                                                 std::string_view arch,
                                                                 unsigned traits = kAllCallTraits);

/// The query of the kernel of a varlen backward call that op names: kBackwardPrep, kBackwardVarlen or
/// kBackwardFusedVarlen (with config), kBackwardDqVarlen (with dq_config) or kBackwardDqConvertVarlen,
/// resolved from max_seqlen_q and max_seqlen_k. Throws Error(kInvalidArgument) for any other op.
FLASHRTC_API ConfigQuery config_query(const VarlenBackwardParams& params, Operation op);

}  // namespace flashrtc

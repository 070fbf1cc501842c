#pragma once
/// Attention over a KV cache, as serving engines hold one (decode and speculative decoding), and the merge of
/// attention states over disjoint key sets. Argument names follow FlashAttention's flash_attn_with_kvcache.
///
/// A call packs the query heads that share a KV head (and the call's query tokens) into the rows of one tile,
/// so each cached K/V byte is read once per KV head, and splits each sequence's keys over enough thread
/// blocks to fill the GPU (flash-decoding), merging the splits' fp32 partial results in a second kernel.
#include "flashrtc/config_resolution.hpp"
#include "flashrtc/export.hpp"
#include "flashrtc/kvcache_params.hpp"

namespace flashrtc {

/// Appends k_new/v_new (when given), then o = softmax(scale * q k^T + mask) v over each sequence's cached
/// keys, on params.stream in the current device's primary context. Asynchronous; partial results of split
/// keys live in stream-ordered scratch. A sequence with no visible key gets o = 0, lse = -inf.
/// Throws Error: kInvalidArgument naming the argument (nothing launched, outputs untouched); kUnsupported
/// for an explicit config that cannot run; kNoDevice; kNvrtc; kDriver.
FLASHRTC_API void attention_with_kvcache(const KvCacheParams& params);

/// Checks params as attention_with_kvcache does, without a device. Throws Error(kInvalidArgument).
FLASHRTC_API void validate_kvcache(const KvCacheParams& params);

/// The query of the attention kernel of a call (Operation::kDecode): seqlen_q counts the packed rows
/// (heads_q / heads_kv * seqlen_q), seqlen_kv the capacity.
FLASHRTC_API ConfigQuery config_query(const KvCacheParams& params);

/// For a call: validates params, then resolves the attention kernel's family and tile on the current device
/// (no_device_target() without one).
FLASHRTC_API ConfigResolution resolve_config(const KvCacheParams& params);

/// The split count a call uses with the tile it resolves to: params.num_splits when set, else the choice
/// from the shapes, multiprocessors SMs (0: the current device's, 132 without one) and the kernel's blocks
/// per SM (on a device, the driver's occupancy of the loaded kernel: this may compile it). Validates params.
FLASHRTC_API int kvcache_num_splits(const KvCacheParams& params, int multiprocessors = 0);

/// FLOPs by the forward's convention over the cache's capacity (4 * B * Hq * Nq * capacity * d); the
/// device-side lengths are not known to the host.
FLASHRTC_API double kvcache_flops(const KvCacheParams& params);

/// The attention over the union of the two key sets: lse = log(exp(lse_a) + exp(lse_b)), o = the weighted
/// mean of o_a and o_b (weights exp(lse_x - lse)); a row empty in both gets o = 0, lse = -inf. Computed in
/// fp32. Asynchronous; throws Error as attention_with_kvcache does.
FLASHRTC_API void merge_states(const MergeStatesParams& params);

/// Checks params as merge_states does, without a device. Throws Error(kInvalidArgument).
FLASHRTC_API void validate_merge_states(const MergeStatesParams& params);

}  // namespace flashrtc

#pragma once
// The launches of the KV-cache families (decode_params.cuh): the append, the decode attention and the combine
// of its splits take a DecodeLaunch (the validated call, its split count and the partials' scratch);
// merge_states takes its MergeStatesParams.
#include "flashrtc/kvcache_params.hpp"
#include "flashrtc/kernel_family.hpp"

namespace flashrtc::detail {

struct DecodeLaunch {
  const KvCacheParams* params = nullptr;
  int num_splits = 1;
  float* o_partial = nullptr;    // num_splits > 1: [splits, batch, heads_q, seqlen_q, head_dim] fp32
  float* lse_partial = nullptr;  // num_splits > 1: [splits, batch, heads_q, seqlen_q] fp32
};

// The split count of a call of params on a decode kernel of plan's tile with multiprocessors SMs: shapes only
// (the cache's capacity, never its device-side lengths), so a captured graph replays for any lengths.
// params.num_splits when set. Where the (sequence, KV head, row block) blocks alone leave a fifth of the
// resident slots (SMs x blocks per SM) idle: the most splits that fit one wave when that fills 85% of the
// slots, else the fewest whose waves are 85% as full as the best, keeping at least two key tiles per split.
int decode_split_count(const KvCacheParams& params, const CallPlan& plan, int multiprocessors);

// One block per (split, row block, KV head, sequence), split fastest (decode_block.cuh).
void build_decode_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args);
// block_m output rows of [batch, heads_q, seqlen_q] per block.
void build_decode_combine_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args);
// block_m appended rows of [batch, seqlen_new, heads_kv] per block.
void build_kv_append_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args);
// block_m rows of [batch, heads, seqlen] per block; op_params is a MergeStatesParams.
void build_merge_states_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args);

}  // namespace flashrtc::detail

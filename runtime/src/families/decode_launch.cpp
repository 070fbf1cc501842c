#include "families/decode_launch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "flashrtc/arch.hpp"
#include "flashrtc/decode_params.cuh"
#include "flashrtc/error.hpp"
#include "flashrtc/forward_params.cuh"

namespace flashrtc::detail {

namespace {

int blocks_for(__int128 rows, int per_block, const char* what) {
  const __int128 blocks = (rows + per_block - 1) / per_block;
  if (blocks > std::numeric_limits<std::int32_t>::max())
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": " +
                                                 std::to_string(static_cast<long double>(blocks)) +
                                                 " thread blocks: index overflow (at most 2^31 - 1)");
  return static_cast<int>(std::max<__int128>(blocks, 1));
}

// The launch of a row kernel: one row per block_m of them, `rows` in all; returns num_rows for its params.
int set_row_launch(LaunchShape& shape, const CallPlan& plan, __int128 rows, const char* rows_text,
                   const char* kernel) {
  shape.grid[0] = static_cast<unsigned>(blocks_for(rows, plan.spec.tile.block_m, kernel));
  shape.block[0] = static_cast<unsigned>(plan.threads);
  shape.dynamic_smem_bytes = static_cast<unsigned>(plan.smem_bytes);
  return blocks_for(rows, 1, rows_text);
}

kernel::KvPages pages_of(const KvCacheParams& p) {
  kernel::KvPages pages{};
  pages.block_table = p.block_table;
  pages.batch_idx = p.block_table ? nullptr : p.cache_batch_idx;
  pages.table_stride = p.block_table_stride;
  pages.page_shift = p.block_table ? __builtin_ctzll(static_cast<unsigned long long>(p.page_size)) : 31;  // a power of two
  pages.num_pages = static_cast<int>(p.num_pages);
  return pages;
}

kernel::KvTensor cache_tensor(const TensorRef& t) {
  return {const_cast<void*>(t.data), t.stride_batch, t.stride_seq, t.stride_head};
}

kernel::KvLengths lengths_of(const KvCacheParams& p) {
  return {p.cache_seqlens, static_cast<int>(p.capacity()), static_cast<int>(p.seqlen_new)};
}

std::int64_t packed_rows(const KvCacheParams& p) { return p.heads_q / p.heads_kv * p.seqlen_q; }

}  // namespace

int decode_split_count(const KvCacheParams& p, const CallPlan& plan, int multiprocessors) {
  if (p.num_splits > 0) return p.num_splits;
  const TileConfig& tile = plan.spec.tile;
  const std::int64_t m_blocks = (packed_rows(p) + tile.block_m - 1) / tile.block_m;
  const std::int64_t blocks = p.batch * p.heads_kv * m_blocks;
  const std::int64_t key_tiles = (p.capacity() + tile.block_n - 1) / tile.block_n;
  // Resident blocks per SM: the driver's count where the plan was made on a device, else from shared memory
  // alone (228 KB per SM on sm_90, 1 KB reserved per block). Registers bound it too: at d = 64 the estimate
  // said 6 where the device runs 5, and the 11 splits it chose spilled into a second wave (205 us against 138
  // for 8 splits, B = 8, 32k keys, H200).
  const std::int64_t per_sm =
      plan.blocks_per_multiprocessor > 0
          ? plan.blocks_per_multiprocessor
          : std::clamp<std::int64_t>(static_cast<std::int64_t>(233472 / (plan.smem_bytes + 1024)), 1,
                                     2048 / plan.threads);
  const std::int64_t slots = std::max(multiprocessors, 1) * per_sm;
  if (blocks >= slots * 8 / 10 || key_tiles < 4) return 1;
  const std::int64_t most = std::min<std::int64_t>({kernel::kMaxDecodeSplits, key_tiles / 2, slots});
  // One wave when it fills most of the resident slots: each block streams at a rate bounded by its loads in
  // flight, so an empty slot is bandwidth lost, and a second wave waits on the first (on an H200, B = 1 with 8
  // KV heads and 64k keys, 396 slots: 49 splits ran 80 us, 43 splits 83 us, 99 splits in two waves 107 us).
  const std::int64_t one_wave = std::min(most, slots / blocks);
  if (one_wave >= 1 && one_wave * blocks * 100 >= slots * 85) return static_cast<int>(one_wave);
  // Otherwise the smallest count whose waves are at least 85% as full as the fullest's (32 sequences of 8 KV
  // heads: 3 splits in two waves ran 262 us, 1 split 278 us).
  std::vector<double> efficiency(static_cast<std::size_t>(most) + 1);
  double best = 0;
  for (std::int64_t s = 1; s <= most; ++s) {
    const double waves = static_cast<double>(blocks * s) / static_cast<double>(slots);
    efficiency[s] = waves / std::ceil(waves);
    best = std::max(best, efficiency[s]);
  }
  for (std::int64_t s = 1; s <= most; ++s)
    if (efficiency[s] >= 0.85 * best) return static_cast<int>(s);
  return 1;
}

void build_decode_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args) {
  const DecodeLaunch& call = *static_cast<const DecodeLaunch*>(op_params);
  const KvCacheParams& p = *call.params;
  kernel::DecodeParams k{};
  k.q = p.q.data;
  k.o = const_cast<void*>(p.o.data);
  k.lse = p.lse;
  k.o_partial = call.o_partial;
  k.lse_partial = call.lse_partial;
  k.q_stride_batch = p.q.stride_batch, k.q_stride_seq = p.q.stride_seq, k.q_stride_head = p.q.stride_head;
  k.o_stride_batch = p.o.stride_batch, k.o_stride_seq = p.o.stride_seq, k.o_stride_head = p.o.stride_head;
  k.k_cache = cache_tensor(p.k_cache);
  k.v_cache = cache_tensor(p.v_cache);
  k.pages = pages_of(p);
  k.lengths = lengths_of(p);
  k.batch = static_cast<int>(p.batch);
  k.seqlen_q = static_cast<int>(p.seqlen_q);
  k.heads_q = static_cast<int>(p.heads_q);
  k.heads_kv = static_cast<int>(p.heads_kv);
  k.kv_group = static_cast<int>(p.heads_q / p.heads_kv);
  k.rows = static_cast<int>(packed_rows(p));
  k.num_m_blocks = static_cast<int>((packed_rows(p) + plan.spec.tile.block_m - 1) / plan.spec.tile.block_m);
  k.num_splits = call.num_splits;
  k.num_blocks = blocks_for(static_cast<__int128>(k.num_m_blocks) * p.heads_kv * p.batch * call.num_splits, 1,
                            "splits * row blocks * heads_kv * batch");
  const double scale = p.softmax_scale ? *p.softmax_scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  k.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  shape.grid[0] = static_cast<unsigned>(k.num_blocks);
  shape.block[0] = static_cast<unsigned>(plan.threads);
  shape.dynamic_smem_bytes = static_cast<unsigned>(plan.smem_bytes);
  args.push(k);
}

void build_decode_combine_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args) {
  const DecodeLaunch& call = *static_cast<const DecodeLaunch*>(op_params);
  const KvCacheParams& p = *call.params;
  kernel::DecodeCombineParams k{};
  k.o_partial = call.o_partial;
  k.lse_partial = call.lse_partial;
  k.o = const_cast<void*>(p.o.data);
  k.lse = p.lse;
  k.o_stride_batch = p.o.stride_batch, k.o_stride_seq = p.o.stride_seq, k.o_stride_head = p.o.stride_head;
  k.batch = static_cast<int>(p.batch);
  k.seqlen_q = static_cast<int>(p.seqlen_q);
  k.heads_q = static_cast<int>(p.heads_q);
  const __int128 rows = static_cast<__int128>(p.batch) * p.heads_q * p.seqlen_q;
  k.num_rows = set_row_launch(shape, plan, rows, "batch * heads_q * seqlen_q", "decode combine");
  k.num_splits = call.num_splits;
  // Its launch hides behind the decode kernel's last blocks; it waits for their partials itself.
  shape.overlaps_previous = parse_arch_cc(plan.arch).value_or(0) >= 90;
  args.push(k);
}

void build_kv_append_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args) {
  const KvCacheParams& p = *static_cast<const DecodeLaunch*>(op_params)->params;
  kernel::KvAppendParams k{};
  k.k_new = p.k_new.data;
  k.v_new = p.v_new.data;
  k.k_new_stride_batch = p.k_new.stride_batch, k.k_new_stride_seq = p.k_new.stride_seq,
  k.k_new_stride_head = p.k_new.stride_head;
  k.v_new_stride_batch = p.v_new.stride_batch, k.v_new_stride_seq = p.v_new.stride_seq,
  k.v_new_stride_head = p.v_new.stride_head;
  k.k_cache = cache_tensor(p.k_cache);
  k.v_cache = cache_tensor(p.v_cache);
  k.pages = pages_of(p);
  k.lengths = lengths_of(p);
  k.batch = static_cast<int>(p.batch);
  k.heads_kv = static_cast<int>(p.heads_kv);
  const __int128 rows = static_cast<__int128>(p.batch) * p.seqlen_new * p.heads_kv;
  k.num_rows = set_row_launch(shape, plan, rows, "batch * seqlen_new * heads_kv", "KV append");
  args.push(k);
}

void build_merge_states_launch(const CallPlan& plan, const void* op_params, LaunchShape& shape, KernelArgs& args) {
  const MergeStatesParams& p = *static_cast<const MergeStatesParams*>(op_params);
  kernel::MergeStatesParams k{};
  k.o_a = p.o_a.data;
  k.o_b = p.o_b.data;
  k.o = const_cast<void*>(p.o.data);
  k.lse_a = p.lse_a;
  k.lse_b = p.lse_b;
  k.lse = p.lse;
  k.a_stride_batch = p.o_a.stride_batch, k.a_stride_seq = p.o_a.stride_seq, k.a_stride_head = p.o_a.stride_head;
  k.b_stride_batch = p.o_b.stride_batch, k.b_stride_seq = p.o_b.stride_seq, k.b_stride_head = p.o_b.stride_head;
  k.o_stride_batch = p.o.stride_batch, k.o_stride_seq = p.o.stride_seq, k.o_stride_head = p.o.stride_head;
  k.batch = static_cast<int>(p.batch);
  k.seqlen = static_cast<int>(p.seqlen);
  k.heads = static_cast<int>(p.heads);
  const __int128 rows = static_cast<__int128>(p.batch) * p.heads * p.seqlen;
  k.num_rows = set_row_launch(shape, plan, rows, "batch * heads * seqlen", "merge_states");
  args.push(k);
}

}  // namespace flashrtc::detail

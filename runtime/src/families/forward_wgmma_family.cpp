// Forward attention for Hopper (sm_90a): TMA, wgmma and warp specialization, fp16 and bf16:
// kernel_sources/flashrtc/attention_forward_wgmma.cuh. Ranks above the mma.sync family on sm_90a; calls it
// cannot take (head dims off its grid, strides no TMA map describes) fall back to that family. Its
// variable-length variant (varlen-wgmma) is the same kernel template over the sequences of a packed call,
// with the same tiles, above varlen-mma.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "families/attention_tensor_map.hpp"
#include "families/builtin_families.hpp"
#include "families/forward_launch.hpp"
#include "families/hopper_rules.hpp"
#include "families/shape_rules.hpp"
#include "families/template_args.hpp"
#include "flashrtc/attention_params.hpp"
#include "flashrtc/wgmma_forward_shape.cuh"

namespace flashrtc::detail {

namespace {

WgmmaForwardShape shape(const KernelSpec& s) {
  return {s.head_dim, s.tile.block_m, s.tile.block_n, s.tile.warps, s.tile.stages, s.persistent};
}

// The kernel's Q, K, V and O maps, after its parameters: tensors of `batch` batches (a packed call's are
// one).
void push_tensor_maps(const CallPlan& plan, DType dtype, int head_dim, const TensorRef& q, const TensorRef& k,
                      const TensorRef& v, const TensorRef& o, std::int64_t seqlen_q, std::int64_t seqlen_kv,
                      std::int64_t heads_q, std::int64_t heads_kv, std::int64_t batch, KernelArgs& args) {
  const int panel = shape(plan.spec).panel_bytes();
  const int block_n = plan.spec.tile.block_n;
  args.push(attention_tensor_map(q, dtype, seqlen_q, heads_q, batch, head_dim, 64, panel));
  args.push(attention_tensor_map(k, dtype, seqlen_kv, heads_kv, batch, head_dim, block_n, panel));
  args.push(attention_tensor_map(v, dtype, seqlen_kv, heads_kv, batch, head_dim, block_n, panel));
  args.push(attention_tensor_map(o, dtype, seqlen_q, heads_q, batch, head_dim, 64, panel));
}

// Persistent (one block per SM, where the plan knows the count) or one block per tile, as the plan's kernel
// was built (KernelFamily::persistent below); the kernel takes any grid. A kernel that claims tiles gets a
// zeroed counter of its own for each launch, one that splits its last round the flags and slots of the
// split tiles.
void build_launch(const CallPlan& plan, const void* op_params, LaunchShape& launch, KernelArgs& args) {
  const ForwardParams& p = *static_cast<const ForwardParams*>(op_params);
  kernel::ForwardParams k = forward_kernel_params(plan, p);
  const bool persistent = plan.spec.persistent && plan.multiprocessors > 0;
  // Blocks that claim causal tiles take them in chunks of about one round of (batch, head) pairs, each chunk's
  // query blocks longest first across its pairs. On an H200, bf16 / fp16: +1.4 to +9% at d = 96-256 with 8 to
  // 66 query blocks per pair (1k-8k keys); with 4 (512 keys) -0.4 to -6%, at d = 64 -1 to +0.5%, and chunks
  // of two pairs at 16k keys -8 to +6%: one pair at a time there (docs/measurements/forward-hopper/causal_chunks.md).
  if (persistent && wgmma_forward_claims_tiles(static_cast<int>(p.mask)) && k.num_m_blocks >= 8 && p.head_dim > 64)
    k.causal_chunk = std::max(1, plan.multiprocessors / k.num_m_blocks);
  launch.grid[0] =
      static_cast<unsigned>(persistent ? std::min(k.num_blocks, plan.multiprocessors) : k.num_blocks);
  const WgmmaForwardShape kernel_shape = shape(plan.spec);
  // Without a mask, a grid whose last round leaves blocks idle shares that round's tiles out by key tiles
  // instead (stream-K; tile_scheduler.cuh's kStrideSplit), in the kernels that can: every block then takes
  // the same number of key tiles, give or take one. A call of fewer tiles than SMs (decode, few heads) is one
  // partial round: all of its tiles are shared out over one block per SM. A split costs each block about an
  // eighth of a tile's key tiles more (its pieces' Q loads, pipeline starts and epilogues, the merges, the
  // flags' memset): on an H200 that fits the partial rounds' gains (about 1% under the key-tile estimate at
  // 4k-16k keys) and the calls of 104-128 tiles on 132 SMs, where a split every tile needed cuts of 12% or
  // more to gain (docs/measurements/forward-hopper/stream_k.md). The host splits where the busiest block's key tiles,
  // with that cost, drop by 1% or more.
  if (persistent && kernel_shape.splits_last_round(static_cast<int>(p.mask))) {
    const int blocks = plan.multiprocessors;
    const std::int64_t key_tiles = (p.seqlen_kv + plan.spec.tile.block_n - 1) / plan.spec.tile.block_n;
    const int rest = k.num_blocks % blocks;
    const std::int64_t units = rest * key_tiles;
    // Key tiles of the busiest block, whole rounds against the split and its cost.
    const std::int64_t busiest = (k.num_blocks / blocks + (rest != 0)) * key_tiles;
    const std::int64_t busiest_split =
        k.num_blocks / blocks * key_tiles + (units + blocks - 1) / blocks + (key_tiles + 7) / 8;
    // Unit indices stay in 32 bits (tile_scheduler.cuh).
    if ((busiest - busiest_split) * 100 >= busiest && units <= std::numeric_limits<std::int32_t>::max()) {
      launch.grid[0] = static_cast<unsigned>(blocks);
      k.whole_tiles = k.num_blocks - rest;
      k.split_key_tiles = static_cast<int>(key_tiles);
      k.split_run = static_cast<int>(units / blocks);
      k.split_longer_runs = static_cast<int>(units % blocks);
      launch.work_bytes = kernel_shape.split_work_bytes(launch.grid[0]);
      launch.work_zeroed_bytes = kernel_shape.split_flag_bytes(launch.grid[0]);
    }
  }
  launch.block[0] = static_cast<unsigned>(plan.threads);
  launch.dynamic_smem_bytes = static_cast<unsigned>(plan.smem_bytes);
  args.push(k);
  push_tensor_maps(plan, p.dtype, static_cast<int>(p.head_dim), p.q, p.k, p.v, p.o, p.seqlen_q, p.seqlen_kv,
                   p.heads_q, p.heads_kv, p.batch, args);
  args.push(static_cast<unsigned*>(nullptr));
  if ((plan.spec.persistent && wgmma_forward_claims_tiles(static_cast<int>(p.mask))) ||
      k.whole_tiles < k.num_blocks)
    launch.work_buffer_arg = args.count - 1;
}

// The variable-length kernel: one block per (sequence, head, query block of max_seqlen_q), the portable
// varlen kernel's grid; maps over the packed tensors as one batch of total rows (the kernel offsets its
// coordinates by its sequence's first rows). No work buffer: it neither claims nor splits tiles. A call
// without keys (total_k = 0) gets K and V maps of one row, which no block reads (every sequence has no key
// tile): a map has no empty dimension.
void build_varlen_launch(const CallPlan& plan, const void* op_params, LaunchShape& launch, KernelArgs& args) {
  build_varlen_forward_launch(plan, op_params, launch, args);
  const VarlenForwardParams& p = *static_cast<const VarlenForwardParams*>(op_params);
  push_tensor_maps(plan, p.dtype, static_cast<int>(p.head_dim), p.q, p.k, p.v, p.o, p.total_q,
                   std::max<std::int64_t>(p.total_k, 1), p.heads_q, p.heads_kv, 1, args);
  args.push(static_cast<unsigned*>(nullptr));
}

KernelFamily describe() {
  KernelFamily f;
  f.name = "wgmma";
  f.operation = Operation::kForward;
  use_hopper_rules(f, 256);
  f.header = "flashrtc/attention_forward_wgmma.cuh";
  f.kernel_template = "flashrtc::attention_forward_wgmma";
  f.template_args = attention_template_args();
  f.template_args.push_back(TemplateArg::kPersistent);
  f.tile_axes = {{128, 192, 256}, {64, 80, 96, 112, 128, 144, 160, 176, 192}, {12, 16, 20}, {2, 3}};
  // Consumer warp groups of 64 query rows: two; three or four at d = 64 (FlashAttention-3's 192-row tile, and
  // 256x64 for short unmasked calls); three for long calls at d = 96 and unmasked at d = 128. K and V in two or
  // three stages; block_n as large as O, S and P fit in the consumers' registers and the tiles in 227 KiB.
  // bf16 on an H200, B = 4, H = 2048 / d, N = 4096, `flashrtc tune --space full`, and `flashrtc bench` over
  // the standard grid for d = 64 (docs/PERFORMANCE.md). Every default compiles without spills for sm_90a under
  // each mask its row serves.
  // d = 128 below 4k keys: 128x128 on two consumer groups, under every mask. From 4k three groups without a
  // mask (192x80), two under a causal one (128x160).
  const KernelFamily::DefaultCandidate d128_short = {{128, 128, 12, 2}};
  f.defaults = {
      {64,
       {{{192, 128, 16, 3}, 0, 2048}, {{256, 64, 20, 3}}},
       "d=64 unmasked, bf16 512-16k keys: 370-494 TFLOP/s against 361-455 for 128x128x12x2 (+2% at 512, "
       "+8-10% from 2k); three stages 0.5-1.5% above two. Up to 1k keys four consumer groups, 256x64x20x3: "
       "bf16 and fp16 on an H200 +6.5-7% at 512 and 1k keys over 192x128, -2% at 2k "
       "(docs/measurements/forward-hopper/four_consumer_groups.md)",
       {MaskKind::kNone}},
      {64,
       {{{192, 128, 16, 2}, 0, 2048}, {{256, 64, 20, 2}}},
       "d=64 causal: 192x128 against 128x128 / 192x112 (H200, bf16 and fp16, "
       "docs/measurements/forward-hopper/short_causal_defaults.md): 512 keys +0.4..+5%, 1k +2-3%, 2k +8%; 4k-16k +4-6% "
       "over 192x112 on the persistent grid (docs/measurements/forward-hopper/uniform_group.md). Up to 1k keys four "
       "consumer groups, 256x64x20x2: +3% at 512 and 1k over 192x128, -4% at 2k (bf16)"},
      {96,
       {{{192, 96, 16, 3}, 0, 2048}, {{128, 128, 12, 2}}},
       "d=96: from 2k keys three consumer groups, 192x96x16x3: bf16 and fp16 on an H200, compare.py +1 to +13% "
       "over 128x128 at 2k-16k (both masks), +8% sustained at the power cap; 128x128 up to 1k keys (192x96 -2 to "
       "-9% there) (docs/measurements/forward-hopper/three_groups_d96_d128.md)"},
      {128,
       {{{192, 80, 16, 3}, 0, 4096}, d128_short},
       "d=128 unmasked: from 4k keys three consumer groups, 192x80x16x3: bf16 / fp16 on an H200, compare.py "
       "+5.9 / +3.8% over 128x160 at 8k, +6.5 / +7.6% at 16k, +2.5% sustained at the power cap "
       "(three_groups_d96_d128.md); at 4k +1.3 / +1.5%, at 2k -0.6% (rescale_branch_synccheck.md). Below, as "
       "under a causal mask",
       {MaskKind::kNone}},
      {128,
       {{{128, 160, 12, 2}, 0, 4096}, d128_short},
       "d=128: 634 (causal 535); 128x128 626 (530), 128x176 625 (541); below 4096 keys 128x128, whose key "
       "tiles do not overhang the sequence (160-key tiles compute 25% padding at 512 keys), and at 2k keys "
       "causal +4% over 128x160 (short_causal_defaults.md). Causal on 192x80: -2 to +5% at 4k-16k, -1.7 / -2.6% "
       "at 2k (three_groups_d96_d128.md); -1 to +4% at 2k-16k with the rescale wait branching on the step "
       "(rescale_branch_synccheck.md)"},
      {160,
       {{{128, 128, 12, 2}}},
       "d=160: 128x128 over 128x112, compare.py on an H200, bf16 and fp16 512-16k keys, both masks: +2.0% "
       "geometric mean (causal +1.4 to +5.8% but -0.9% at fp16 8k; unmasked -4 to +7% within the runs' "
       "spread); 128x144 lost 2-6% up to 1k keys (rescale_branch_synccheck.md)"},
      {192,
       {{{128, 112, 12, 2}, 0, 2048}, {{128, 64, 12, 2}}},
       "d=192 causal up to 1k keys: 128x64, whose first group skips the diagonal's last key tile and which "
       "holds two Q slots: bf16 on an H200 +13.7% at 512 keys and +6.3% at 1k over 128x112, 0.0% at 2k "
       "(docs/measurements/forward-hopper/o_in_kv.md)",
       {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}},
      {192,
       {{{128, 112, 12, 2}}},
       "d=192: the widest key tile that fits (128x128 exceeds 227 KiB); 128x96 on an H200, compare.py bf16 / fp16 "
       "512-16k keys, both masks: +0.3% geometric mean, -3 to -5% at 512 and 4k unmasked, +1 to +4% at 512 "
       "causal (rescale_branch_synccheck.md)"},
      {224,
       {{{128, 96, 12, 2}, 0, 1024}, {{128, 64, 12, 2}}},
       "d=224 causal at 512 keys and fewer: 128x64, bf16 on an H200 +8.5% at 512 over 128x96, -0.6% at 1k, -4% "
       "at 2k (docs/measurements/forward-hopper/o_in_kv.md)",
       {MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight}},
      {224,
       {{{128, 96, 12, 2}}},
       "d=224: 128x96 over 128x80, compare.py on an H200, bf16 / fp16 512-16k keys: +0.4 to +5.8% unmasked, "
       "+1.4 to +4.8% causal (docs/measurements/sanitizers/rescale_branch_synccheck.md)"},
      {256,
       {{{128, 80, 12, 2}}},
       "d=256 unmasked: 740 in `flashrtc run` (B=4, H=8, N=4096) against 698-706 for 128x64",
       {MaskKind::kNone}},
      {256,
       {{{128, 64, 12, 2}}},
       "d=256: 645 (causal 548) in the sweep; 128x80 spills 40-56 bytes under a causal mask"},
  };
  // A persistent grid hides each work tile's prologue and epilogue under its neighbours' work, under a causal
  // mask too: the warp group index is uniform, so ptxas keeps the shared-memory descriptors in uniform
  // registers across the tile loop.
  f.persistent = {
      {{MaskKind::kNone},
       0,
       "every tile costs the same: blocks stride over them, the partial last round split by key tiles"},
      {{MaskKind::kCausalTopLeft, MaskKind::kCausalBottomRight},
       0,
       "bf16 on an H200: +6-12% at 512 keys, +1-7% at 1k, +1-2% at 2k (d=64/128, "
       "docs/measurements/forward-hopper/causal_tile_scheduler.md); 4k-16k d=64 +4-10%, d=128 0 to +4.5%, "
       "d=256 +1-4% (docs/measurements/forward-hopper/uniform_group.md)"},
  };
  use_shape_rules<shape>(f);
  f.build_launch = build_launch;
  return f;
}

}  // namespace

const KernelFamily& forward_wgmma_family() {
  static const KernelFamily family = describe();
  return family;
}

const KernelFamily& forward_varlen_wgmma_family() {
  static const KernelFamily family = [] {
    // The dense kernel's body per sequence, with its tiles and defaults (a sequence is a dense problem of its
    // own lengths), on the grid of one block per tile: no persistent rule.
    KernelFamily f = describe();
    f.name = "varlen-wgmma";
    f.operation = Operation::kForwardVarlen;
    f.template_args.push_back(TemplateArg::kVarlen);
    f.persistent.clear();
    f.build_launch = build_varlen_launch;
    return f;
  }();
  return family;
}

}  // namespace flashrtc::detail

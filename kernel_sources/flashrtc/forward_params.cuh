#pragma once
// The forward kernel's launch parameters. Compiled by NVRTC and by the host compiler alike (the runtime
// includes this file), so the struct has one layout on both sides: fixed-width fields only.

namespace flashrtc {
namespace kernel {

// Values match flashrtc::MaskKind (the runtime static_asserts it).
enum class Mask : int { kNone = 0, kCausalTopLeft = 1, kCausalBottomRight = 2 };

struct ForwardParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // [batch, heads_q, seqlen_q] or null
  // Element strides of [batch, seq, head]; the head dim is contiguous (checked by the runtime).
  long long q_stride_batch, q_stride_seq, q_stride_head;
  long long k_stride_batch, k_stride_seq, k_stride_head;
  long long v_stride_batch, v_stride_seq, v_stride_head;
  long long o_stride_batch, o_stride_seq, o_stride_head;
  int seqlen_q, seqlen_kv;
  int heads_q;
  int kv_group;      // heads_q / heads_kv
  int num_m_blocks;  // ceil(seqlen_q / block_m)
  float scale_log2;  // softmax scale * log2(e): scores go straight into exp2
  // batch * heads_q * num_m_blocks work tiles: tile t = (batch * heads_q + head) * num_m_blocks + m, one per
  // thread block or strided over a persistent grid. Under a causal mask the tiles come in chunks of
  // causal_chunk (batch, head) pairs (ForwardBlock): 1 is the order above, the later query blocks first.
  int num_blocks;
  int causal_chunk;
  // Without a mask on a persistent grid: the tiles from whole_tiles on (the partial last round) are shared
  // out by key tiles (TileSchedule::kStrideSplit), split_key_tiles = ceil(seqlen_kv / block_n) of each:
  // block b takes a run of split_run of them, or split_run + 1 where b < split_longer_runs. whole_tiles =
  // num_blocks: none (and in every other kernel).
  int whole_tiles, split_key_tiles, split_run, split_longer_runs;
};

// The attention variants a kernel specialization computes, a bit set (docs/variants.md; the host's
// flashrtc::VariantBit has the same values). A kernel that takes them as a template argument takes them as
// this type, so that its specializations never collide with another template argument's.
// The bits are enumerators rather than constexpr variables: NVRTC emits those into every kernel's
// constant sections.
enum class Variants : unsigned {};
enum VariantBit : unsigned {
  kVariantWindow = 1u,   // a sliding window around the aligned diagonal
  kVariantSoftcap = 2u,  // scores pass through softcap * tanh(s / softcap)
  kVariantAlibi = 4u,    // reserved: ALiBi slopes
  kVariantSinks = 8u,    // reserved: attention sinks
};

// A forward with variants: the dense parameters and the variants' values. Fields of their own rather than of
// ForwardParams: VarlenForwardParams embeds ForwardParams, and grown it would move every varlen kernel's
// parameters (and change their code).
struct VariantForwardParams {
  ForwardParams dense;
  int window_left, window_right;    // keys visible either side of the diagonal; -1: unbounded on that side
  float softcap_pre, softcap_post;  // softcap_factors (score_mods.cuh); unused without kVariantSoftcap
};

// The variable-length forward's parameters (docs/varlen.md): the dense ones over the packed tensors, with one
// "batch" per sequence (batch strides 0), seqlen_q and seqlen_kv the host's max_seqlen_q and max_seqlen_k and
// num_m_blocks of max_seqlen_q; and the device arrays a block reads its sequence's bounds from, clamped into
// total_q and total_k rows.
struct VarlenForwardParams {
  ForwardParams dense;
  const int* cu_seqlens_q;  // [sequences + 1]
  const int* cu_seqlens_k;  // [sequences + 1]
  const int* seqused_k;     // [sequences] or null
  int total_q, total_k;     // rows of q and o, of k and v; total_q also lse's stride between heads
};

}  // namespace kernel
}  // namespace flashrtc

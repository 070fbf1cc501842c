#pragma once
// `--op decode` in config and bench: a call of attention_with_kvcache described on the command line (one
// query token per sequence by default, over a contiguous or paged cache of seqlen_kv tokens per sequence).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashrtc/flashrtc.hpp"
#include "shared_options.hpp"

namespace flashrtc::cli {

/// One decode call's shape. page_size 0: a contiguous cache (one page of seqlen_kv tokens per sequence).
struct DecodeShape {
  DType dtype = DType::kBFloat16;
  MaskKind mask = MaskKind::kNone;
  std::int64_t batch = 1, heads_q = 32, heads_kv = 32, seqlen_q = 1, seqlen_kv = 0, head_dim = 0;
  std::int64_t page_size = 0;
  int splits = 0;  ///< KvCacheParams::num_splits: 0 chooses from the shapes
};

/// The device pointers of one call (decode_placeholders(): validation placeholders, never dereferenced).
struct DecodeBuffers {
  const void *q, *k_cache, *v_cache, *o;
  const std::int32_t *block_table, *cache_seqlens;
  float* lse = nullptr;
};
/// Placeholders only: for the argument checks and config resolution without a device.
DecodeBuffers decode_placeholders();

/// Pages per sequence (ceil(seqlen_kv / page_size)); 1 for a contiguous cache.
std::int64_t decode_pages_per_sequence(const DecodeShape& s);
/// Pages of the whole cache: batch * decode_pages_per_sequence.
std::int64_t decode_num_pages(const DecodeShape& s);

/// The call's parameters; tile, when given, is its explicit config.
KvCacheParams decode_params(const DecodeShape& s, const DecodeBuffers& b,
                            const std::optional<TileConfig>& tile = std::nullopt);

/// Bytes a call must move at least: the K and V it reads (B * Hkv * Nk * d * 2 elements) plus q and o.
double decode_bytes(const DecodeShape& s);

/// "B=8 Hq=32 Hkv=8 Nq=1 Nk=8192 d=128, pages of 16" (", contiguous cache" when page_size is 0).
std::string describe(const DecodeShape& s);

/// The options only --op decode takes, in config (one call) and bench (comma-separated lists, every
/// combination measured). heads_kv defaults to heads; seqlen_kv is required with --op decode.
struct DecodeOptions {
  std::vector<std::int64_t> batches = {1}, seqlens_kv, page_sizes = {0};
  std::int64_t heads = 32, seqlen_q = 1;
  std::optional<std::int64_t> heads_kv;
  int splits = 0;
  std::vector<CLI::Option*> added;
  CLI::Option* heads_options[2] = {};  ///< --heads, --heads-kv: bench's --op varlen takes them too
  /// lists: bench's comma-separated --batch, --seqlen-kv and --page-size; else one value each.
  void add_to(CLI::App& app, bool lists);
  /// A usage error for one of these options without --op decode (but --heads and --heads-kv with bench's
  /// --op varlen), or for --op decode without --seqlen-kv.
  void check_mode(const std::string& op) const;
  /// Every batch x seqlen_kv x page_size, with the given dtype, mask and head dim.
  std::vector<DecodeShape> shapes(DType dtype, MaskKind mask, std::int64_t head_dim) const;
};

/// The split count kvcache_num_splits gives the call, and for how many SMs ("the NVIDIA H200's 132 SMs").
struct DecodeSplits {
  int splits = 0;
  std::string why;
};
DecodeSplits decode_splits(const KvCacheParams& params);

}  // namespace flashrtc::cli

#include "decode_call.hpp"

#include "cli_support.hpp"
#include "flashrtc_tools/host_tensors.hpp"

namespace flashrtc::cli {

DecodeBuffers decode_placeholders() {
  const auto* ids = reinterpret_cast<const std::int32_t*>(kValidationPlaceholder);
  return {kValidationPlaceholder,
          kValidationPlaceholder,
          kValidationPlaceholder,
          kValidationPlaceholder,
          ids,
          ids};
}

std::int64_t decode_pages_per_sequence(const DecodeShape& s) {
  return s.page_size > 0 ? (s.seqlen_kv + s.page_size - 1) / s.page_size : 1;
}

std::int64_t decode_num_pages(const DecodeShape& s) {
  return s.batch * decode_pages_per_sequence(s);
}

KvCacheParams decode_params(const DecodeShape& s, const DecodeBuffers& b,
                            const std::optional<TileConfig>& tile) {
  using tools::make_tensor_ref;
  KvCacheParams p;
  p.dtype = s.dtype;
  p.mask = s.mask;
  p.batch = s.batch;
  p.seqlen_q = s.seqlen_q;
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.head_dim = s.head_dim;
  p.q = make_tensor_ref(tools::Layout::kBnhd, b.q, s.seqlen_q, s.heads_q, s.head_dim);
  p.o = make_tensor_ref(tools::Layout::kBnhd, b.o, s.seqlen_q, s.heads_q, s.head_dim);
  const bool paged = s.page_size > 0;
  p.page_size = paged ? s.page_size : s.seqlen_kv;
  p.num_pages = decode_num_pages(s);
  p.k_cache = make_tensor_ref(tools::Layout::kBnhd, b.k_cache, p.page_size, s.heads_kv, s.head_dim);
  p.v_cache = make_tensor_ref(tools::Layout::kBnhd, b.v_cache, p.page_size, s.heads_kv, s.head_dim);
  if (paged) {
    p.block_table = b.block_table;
    p.max_pages_per_seq = p.block_table_stride = decode_pages_per_sequence(s);
  }
  p.cache_seqlens = b.cache_seqlens;
  p.lse = b.lse;
  p.num_splits = s.splits;
  p.config = tile;
  return p;
}

double decode_bytes(const DecodeShape& s) {
  const double elem = static_cast<double>(dtype_size(s.dtype));
  const double kv = 2.0 * s.batch * s.heads_kv * s.seqlen_kv * s.head_dim;
  const double q_and_o = 2.0 * s.batch * s.seqlen_q * s.heads_q * s.head_dim;
  return (kv + q_and_o) * elem;
}

std::string describe(const DecodeShape& s) {
  return "B=" + std::to_string(s.batch) + " Hq=" + std::to_string(s.heads_q) +
         " Hkv=" + std::to_string(s.heads_kv) + " Nq=" + std::to_string(s.seqlen_q) +
         " Nk=" + std::to_string(s.seqlen_kv) + " d=" + std::to_string(s.head_dim) +
         (s.page_size > 0 ? ", pages of " + std::to_string(s.page_size) : std::string(", contiguous cache"));
}

void DecodeOptions::add_to(CLI::App& app, bool lists) {
  const std::string each = lists ? " (a comma-separated list)" : "";
  const auto list_or_one = [&](const char* name, std::vector<std::int64_t>& values, const std::string& help) {
    CLI::Option* option = app.add_option(name, values, help + each)->check(count_validator());
    if (lists)
      option->delimiter(',');
    else
      option->expected(1);
    return option;
  };
  added.push_back(list_or_one("--batch", batches, "with --op decode: sequences")->capture_default_str());
  added.push_back(list_or_one("--seqlen-kv", seqlens_kv,
                              "with --op decode (required): tokens in each sequence's cache, all attended"));
  added.push_back(app.add_option("--page-size", page_sizes,
                                 "with --op decode: tokens per page of a paged cache (a power of two; bench "
                                 "shuffles its block table); 0: a contiguous cache" +
                                     each)
                      ->capture_default_str()
                      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 30)));
  if (lists)
    added.back()->delimiter(',');
  else
    added.back()->expected(1);
  // bench's --op varlen takes the heads too (lists: bench's options).
  const std::string ops = lists ? "with --op decode or varlen: " : "with --op decode: ";
  added.push_back(app.add_option("--heads", heads,
                                 ops + "query heads" +
                                     (lists ? " (decode: 32 by default; varlen: the grid's, 2048 / d)" : ""))
                      ->check(count_validator()));
  if (!lists) added.back()->capture_default_str();
  heads_options[0] = added.back();
  added.push_back(app.add_option("--heads-kv", heads_kv, ops + "key/value heads (default: --heads)")
                      ->check(count_validator()));
  heads_options[1] = added.back();
  added.push_back(app.add_option("--seqlen-q", seqlen_q,
                                 "with --op decode: query tokens per sequence (1 decodes; more: speculative)")
                      ->capture_default_str()
                      ->check(count_validator()));
  added.push_back(app.add_option("--splits", splits,
                                 "with --op decode: key splits per sequence and KV head (num_splits); 0 lets "
                                 "kvcache_num_splits choose")
                      ->capture_default_str()
                      ->check(CLI::Range(0, 256)));
}

void DecodeOptions::check_mode(const std::string& op) const {
  if (op == "decode") {
    if (seqlens_kv.empty())
      throw UsageError("--op decode needs --seqlen-kv (the tokens in each sequence's cache)");
    return;
  }
  for (const CLI::Option* option : added)
    if (option->count() > 0 &&
        !(op == "varlen" && (option == heads_options[0] || option == heads_options[1])))
      throw UsageError(option->get_name() + " goes with --op decode");
}

std::vector<DecodeShape> DecodeOptions::shapes(DType dtype, MaskKind mask, std::int64_t head_dim) const {
  std::vector<DecodeShape> out;
  for (std::int64_t batch : batches)
    for (std::int64_t seqlen_kv : seqlens_kv)
      for (std::int64_t page_size : page_sizes) {
        DecodeShape s;
        s.dtype = dtype;
        s.mask = mask;
        s.batch = batch;
        s.heads_q = heads;
        s.heads_kv = heads_kv.value_or(heads);
        s.seqlen_q = seqlen_q;
        s.seqlen_kv = seqlen_kv;
        s.head_dim = head_dim;
        s.page_size = page_size;
        s.splits = splits;
        out.push_back(s);
      }
  return out;
}

DecodeSplits decode_splits(const KvCacheParams& params) {
  DecodeSplits out;
  out.splits = kvcache_num_splits(params);
  if (params.num_splits > 0) {
    out.why = "--splits";
  } else if (device_available()) {
    const DeviceInfo device = current_device();
    out.why = "kvcache_num_splits for the " + device.name + "'s " + std::to_string(device.multiprocessors) +
              " SMs, the kernel's occupancy from the driver";
  } else {
    out.why = "kvcache_num_splits without a GPU: for 132 SMs, occupancy from shared memory alone";
  }
  return out;
}

}  // namespace flashrtc::cli

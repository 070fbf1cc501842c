// Argument checks of attention_with_kvcache and merge_states: every rule names the argument and its value and
// runs before anything touches the device. Device-side values (cache_seqlens, block_table, cache_batch_idx)
// cannot be checked here; the kernels clamp them instead (attention_kvcache.hpp).
#include "ops/kvcache_validation.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

#include "flashrtc/decode_params.cuh"
#include "flashrtc/error.hpp"
#include "flashrtc/kernel_family.hpp"
#include "ops/forward_validation.hpp"
#include "ops/variants_validation.hpp"

namespace flashrtc::detail {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

// The kernels index tokens, rows and pages with 32-bit integers.
void check_count(const char* name, std::int64_t value, std::int64_t max = std::numeric_limits<std::int32_t>::max()) {
  if (value <= 0) invalid(std::string(name) + "=" + std::to_string(value) + ": must be >= 1");
  if (value > max)
    invalid(std::string(name) + "=" + std::to_string(value) + ": index overflow, must be <= " + std::to_string(max));
}

void check_aligned(const char* name, const void* p, std::size_t alignment) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
    std::ostringstream s;
    s << name << "=" << p << ": must be " << alignment << "-byte aligned";
    invalid(s.str());
  }
}

void check_common(DType dtype, std::int64_t head_dim) {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16)
    invalid("dtype=" + std::to_string(static_cast<int>(dtype)) + ": must be fp32, fp16 or bf16");
  if (!is_supported_head_dim(static_cast<int>(std::min<std::int64_t>(head_dim, 1 << 20))))
    invalid("head_dim=" + std::to_string(head_dim) + ": must be a multiple of 8 from 8 to " +
            std::to_string(kMaxHeadDim));
}

bool power_of_two(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

void validate_kvcache_arguments(const KvCacheParams& p) {
  check_common(p.dtype, p.head_dim);
  if (p.mask == MaskKind::kCausalTopLeft)
    invalid("mask=causal: a KV cache's causal mask is bottom-right (causal-br): queries follow the cached keys");
  if (p.mask != MaskKind::kNone && p.mask != MaskKind::kCausalBottomRight)
    invalid("mask=" + std::to_string(static_cast<int>(p.mask)) + ": must be none or causal-br");
  check_count("batch", p.batch);
  check_count("seqlen_q", p.seqlen_q);
  check_count("heads_q", p.heads_q);
  check_count("heads_kv", p.heads_kv);
  if (p.heads_q % p.heads_kv != 0)
    invalid("heads_q=" + std::to_string(p.heads_q) + " is not a multiple of heads_kv=" + std::to_string(p.heads_kv));
  check_count("the query rows of one KV head, seqlen_q * (heads_q / heads_kv),", static_cast<std::int64_t>(
                                                   std::min<__int128>(static_cast<__int128>(p.heads_q / p.heads_kv) * p.seqlen_q,
                                                                      std::numeric_limits<std::int64_t>::max())));
  if (p.softmax_scale && !std::isfinite(*p.softmax_scale))
    invalid("softmax_scale=" + std::to_string(*p.softmax_scale) + ": must be finite");
  if (p.num_splits < 0 || p.num_splits > kernel::kMaxDecodeSplits)
    invalid("num_splits=" + std::to_string(p.num_splits) + ": must be 0 (chosen from the shapes) or 1 to " +
            std::to_string(kernel::kMaxDecodeSplits));

  check_count("num_pages", p.num_pages);
  check_count("page_size", p.page_size);
  if (p.block_table) {
    check_aligned("block_table", p.block_table, alignof(std::int32_t));
    if (!power_of_two(p.page_size) || p.page_size > (std::int64_t{1} << 30))
      invalid("page_size=" + std::to_string(p.page_size) + ": a paged cache's page size must be a power of two up to 2^30");
    check_count("max_pages_per_seq", p.max_pages_per_seq);
    if (p.block_table_stride < p.max_pages_per_seq)
      invalid("block_table_stride=" + std::to_string(p.block_table_stride) + ": must be >= max_pages_per_seq=" +
              std::to_string(p.max_pages_per_seq));
    if (static_cast<__int128>(p.batch) * p.block_table_stride > std::numeric_limits<std::int64_t>::max())
      invalid("block_table_stride=" + std::to_string(p.block_table_stride) + ": batch * stride overflows (index overflow)");
    if (p.cache_batch_idx)
      invalid("cache_batch_idx: only for a contiguous cache (block_table is set: the table already maps sequences)");
  }
  const __int128 capacity =
      p.block_table ? static_cast<__int128>(p.max_pages_per_seq) * p.page_size : static_cast<__int128>(p.page_size);
  if (capacity >= std::numeric_limits<std::int32_t>::max())
    invalid("capacity=" + std::to_string(static_cast<long double>(capacity)) +
            " tokens per sequence (max_pages_per_seq * page_size): index overflow, must be < 2^31 - 1");
  if (p.cache_batch_idx) check_aligned("cache_batch_idx", p.cache_batch_idx, alignof(std::int32_t));
  if (p.cache_seqlens) check_aligned("cache_seqlens", p.cache_seqlens, alignof(std::int32_t));

  const std::size_t elem = dtype_size(p.dtype);
  check_tensor("q", p.q, p.seqlen_q, p.heads_q, p.batch, p.head_dim, elem);
  check_tensor("o", p.o, p.seqlen_q, p.heads_q, p.batch, p.head_dim, elem);
  check_tensor("k_cache", p.k_cache, p.page_size, p.heads_kv, p.num_pages, p.head_dim, elem);
  check_tensor("v_cache", p.v_cache, p.page_size, p.heads_kv, p.num_pages, p.head_dim, elem);

  const bool has_k = p.k_new.data != nullptr, has_v = p.v_new.data != nullptr;
  if (has_k != has_v) invalid(std::string(has_k ? "v_new" : "k_new") + ".data is null: k_new and v_new come together");
  if (has_k) {
    check_count("seqlen_new", p.seqlen_new);
    if (p.seqlen_new > capacity)
      invalid("seqlen_new=" + std::to_string(p.seqlen_new) + ": more than a sequence's capacity " +
              std::to_string(static_cast<long long>(capacity)));
    if (!p.cache_seqlens)
      invalid("cache_seqlens is null: appending k_new needs each sequence's length (where to write)");
    check_tensor("k_new", p.k_new, p.seqlen_new, p.heads_kv, p.batch, p.head_dim, elem);
    check_tensor("v_new", p.v_new, p.seqlen_new, p.heads_kv, p.batch, p.head_dim, elem);
  } else if (p.seqlen_new != 0) {
    invalid("seqlen_new=" + std::to_string(p.seqlen_new) + ": must be 0 without k_new and v_new");
  }

  if (p.lse) check_aligned("lse", p.lse, alignof(float));
  if (static_cast<__int128>(p.batch) * p.heads_q * p.seqlen_q * p.head_dim * 4 * kernel::kMaxDecodeSplits >
      std::numeric_limits<std::int64_t>::max())
    invalid("batch * heads_q * seqlen_q * head_dim overflows a 64-bit index (index overflow)");
  check_variants(p.variants, p.heads_q);
  require_served_variants(p.variants, Operation::kDecode);
}

void validate_merge_states_arguments(const MergeStatesParams& p) {
  check_common(p.dtype, p.head_dim);
  check_count("batch", p.batch);
  check_count("seqlen", p.seqlen);
  check_count("heads", p.heads);
  if (static_cast<__int128>(p.batch) * p.heads * p.seqlen > std::numeric_limits<std::int32_t>::max())
    invalid("batch * heads * seqlen=" +
            std::to_string(static_cast<long double>(static_cast<__int128>(p.batch) * p.heads * p.seqlen)) +
            ": index overflow, must be <= 2^31 - 1");
  const std::size_t elem = dtype_size(p.dtype);
  check_tensor("o_a", p.o_a, p.seqlen, p.heads, p.batch, p.head_dim, elem);
  check_tensor("o_b", p.o_b, p.seqlen, p.heads, p.batch, p.head_dim, elem);
  check_tensor("o", p.o, p.seqlen, p.heads, p.batch, p.head_dim, elem);
  if (!p.lse_a) invalid("lse_a is null: the merge weighs each side by its lse");
  if (!p.lse_b) invalid("lse_b is null: the merge weighs each side by its lse");
  check_aligned("lse_a", p.lse_a, alignof(float));
  check_aligned("lse_b", p.lse_b, alignof(float));
  if (p.lse) check_aligned("lse", p.lse, alignof(float));
}

}  // namespace flashrtc::detail

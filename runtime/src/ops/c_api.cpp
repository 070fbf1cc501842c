// The C API: exceptions become status codes and a per-thread message; nothing escapes extern "C".
#include "flashrtc/c_api.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "flashrtc/attention.hpp"
#include "flashrtc/attention_backward.hpp"
#include "flashrtc/attention_kvcache.hpp"
#include "flashrtc/error.hpp"

namespace {

thread_local std::string g_last_error;

flashrtc::TensorRef to_ref(const flashrtc_tensor& t) {
  return {t.data, t.stride_batch, t.stride_seq, t.stride_head, t.stride_dim};
}

static_assert(
    offsetof(flashrtc_forward_params, variants) == FLASHRTC_FORWARD_PARAMS_MIN_SIZE,
    "MIN_SIZE is the first layout, which ends where the variants begin: new fields grow sizeof only");
static_assert(offsetof(flashrtc_forward_params, struct_size) == 0, "struct_size heads the struct");
static_assert(
    offsetof(flashrtc_backward_params, variants) == FLASHRTC_BACKWARD_PARAMS_MIN_SIZE,
    "MIN_SIZE is the first layout, which ends where the variants begin: new fields grow sizeof only");
static_assert(offsetof(flashrtc_backward_params, struct_size) == 0, "struct_size heads the struct");
static_assert(
    offsetof(flashrtc_kvcache_params, variants) == FLASHRTC_KVCACHE_PARAMS_MIN_SIZE,
    "MIN_SIZE is the first layout, which ends where the variants begin: new fields grow sizeof only");
static_assert(offsetof(flashrtc_kvcache_params, struct_size) == 0, "struct_size heads the struct");
static_assert(sizeof(flashrtc_merge_states_params) == FLASHRTC_MERGE_STATES_PARAMS_MIN_SIZE,
              "MIN_SIZE is the first layout: a new field grows sizeof, never MIN_SIZE (then make this a >=)");
static_assert(offsetof(flashrtc_merge_states_params, struct_size) == 0, "struct_size heads the struct");
static_assert(
    offsetof(flashrtc_varlen_forward_params, variants) == FLASHRTC_VARLEN_FORWARD_PARAMS_MIN_SIZE,
    "MIN_SIZE is the first layout, which ends where the variants begin: new fields grow sizeof only");
static_assert(offsetof(flashrtc_varlen_forward_params, struct_size) == 0, "struct_size heads the struct");
static_assert(
    offsetof(flashrtc_varlen_backward_params, variants) == FLASHRTC_VARLEN_BACKWARD_PARAMS_MIN_SIZE,
    "MIN_SIZE is the first layout, which ends where the variants begin: new fields grow sizeof only");
static_assert(offsetof(flashrtc_varlen_backward_params, struct_size) == 0, "struct_size heads the struct");

flashrtc::Error invalid(const std::string& message) {
  return flashrtc::Error(flashrtc::ErrorCode::kInvalidArgument, message);
}

// The defaults of every field this library knows; later fields of a newer caller default to zero bytes.
flashrtc_forward_params default_params(const flashrtc_forward_params*) {
  flashrtc_forward_params p{};
  p.struct_size = sizeof(flashrtc_forward_params);
  p.q.stride_dim = p.k.stride_dim = p.v.stride_dim = p.o.stride_dim = 1;
  return p;
}

flashrtc_backward_params default_params(const flashrtc_backward_params*) {
  flashrtc_backward_params p{};
  p.struct_size = sizeof(flashrtc_backward_params);
  p.q.stride_dim = p.k.stride_dim = p.v.stride_dim = p.o.stride_dim = p.d_o.stride_dim = 1;
  p.d_q.stride_dim = p.d_k.stride_dim = p.d_v.stride_dim = 1;
  return p;
}

flashrtc_kvcache_params default_params(const flashrtc_kvcache_params*) {
  flashrtc_kvcache_params p{};
  p.struct_size = sizeof(flashrtc_kvcache_params);
  p.q.stride_dim = p.k_cache.stride_dim = p.v_cache.stride_dim = p.k_new.stride_dim = p.v_new.stride_dim = 1;
  p.o.stride_dim = 1;
  return p;
}

flashrtc_merge_states_params default_params(const flashrtc_merge_states_params*) {
  flashrtc_merge_states_params p{};
  p.struct_size = sizeof(flashrtc_merge_states_params);
  p.o_a.stride_dim = p.o_b.stride_dim = p.o.stride_dim = 1;
  return p;
}

flashrtc_varlen_forward_params default_params(const flashrtc_varlen_forward_params*) {
  flashrtc_varlen_forward_params p{};
  p.struct_size = sizeof(flashrtc_varlen_forward_params);
  p.q.stride_dim = p.k.stride_dim = p.v.stride_dim = p.o.stride_dim = 1;
  return p;
}

flashrtc_varlen_backward_params default_params(const flashrtc_varlen_backward_params*) {
  flashrtc_varlen_backward_params p{};
  p.struct_size = sizeof(flashrtc_varlen_backward_params);
  p.q.stride_dim = p.k.stride_dim = p.v.stride_dim = p.o.stride_dim = p.d_o.stride_dim = 1;
  p.d_q.stride_dim = p.d_k.stride_dim = p.d_v.stride_dim = 1;
  return p;
}

// The sizes a caller's struct may declare, and the function that sets them, per growable struct.
template <typename Params>
struct SizeRange;
template <>
struct SizeRange<flashrtc_forward_params> {
  static constexpr std::uint32_t kMin = FLASHRTC_FORWARD_PARAMS_MIN_SIZE,
                                 kMax = FLASHRTC_FORWARD_PARAMS_MAX_SIZE;
  static constexpr const char* kInit = "flashrtc_forward_params_init";
};
template <>
struct SizeRange<flashrtc_backward_params> {
  static constexpr std::uint32_t kMin = FLASHRTC_BACKWARD_PARAMS_MIN_SIZE,
                                 kMax = FLASHRTC_BACKWARD_PARAMS_MAX_SIZE;
  static constexpr const char* kInit = "flashrtc_backward_params_init";
};

template <>
struct SizeRange<flashrtc_kvcache_params> {
  static constexpr std::uint32_t kMin = FLASHRTC_KVCACHE_PARAMS_MIN_SIZE,
                                 kMax = FLASHRTC_KVCACHE_PARAMS_MAX_SIZE;
  static constexpr const char* kInit = "flashrtc_kvcache_params_init";
};
template <>
struct SizeRange<flashrtc_merge_states_params> {
  static constexpr std::uint32_t kMin = FLASHRTC_MERGE_STATES_PARAMS_MIN_SIZE,
                                 kMax = FLASHRTC_MERGE_STATES_PARAMS_MAX_SIZE;
  static constexpr const char* kInit = "flashrtc_merge_states_params_init";
};

template <>
struct SizeRange<flashrtc_varlen_forward_params> {
  static constexpr std::uint32_t kMin = FLASHRTC_VARLEN_FORWARD_PARAMS_MIN_SIZE,
                                 kMax = FLASHRTC_VARLEN_FORWARD_PARAMS_MAX_SIZE;
  static constexpr const char* kInit = "flashrtc_varlen_forward_params_init";
};
template <>
struct SizeRange<flashrtc_varlen_backward_params> {
  static constexpr std::uint32_t kMin = FLASHRTC_VARLEN_BACKWARD_PARAMS_MIN_SIZE,
                                 kMax = FLASHRTC_VARLEN_BACKWARD_PARAMS_MAX_SIZE;
  static constexpr const char* kInit = "flashrtc_varlen_backward_params_init";
};

// The caller's struct as this library knows it: the fields inside its declared size, defaults after them.
// Throws for a null p, a size out of range, or a set field beyond what this library knows.
template <typename Params>
Params read_sized(const Params* p) {
  using Range = SizeRange<Params>;
  if (!p) throw invalid("params is null");
  const std::uint32_t size = p->struct_size;
  if (size < Range::kMin || size > Range::kMax)
    throw invalid("params->struct_size=" + std::to_string(size) + ": must be in [" +
                  std::to_string(Range::kMin) + ", " + std::to_string(Range::kMax) + "] bytes; set it with " +
                  Range::kInit + " (or _init_sized with the struct's size)");
  Params known = default_params(p);
  std::memcpy(&known, p, std::min<std::size_t>(size, sizeof known));
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  for (std::size_t i = sizeof known; i < size; ++i) {
    if (bytes[i] != 0)
      throw flashrtc::Error(flashrtc::ErrorCode::kUnsupported,
                            "params->struct_size=" + std::to_string(size) + ": byte " + std::to_string(i) +
                                " is set, in a field this library (flashrtc " FLASHRTC_VERSION_STRING
                                ", struct size " +
                                std::to_string(sizeof known) + ") does not know; use a newer libflashrtc");
  }
  return known;
}

// Fills the first struct_size bytes of p with defaults (only the size when it is above the maximum).
template <typename Params>
void init_sized(Params* p, std::uint32_t struct_size) {
  if (!p || struct_size < sizeof(p->struct_size)) return;
  if (struct_size > SizeRange<Params>::kMax) {  // no buffer is that large: write only the size,
    p->struct_size = struct_size;               // which the call then reports as out of range
    return;
  }
  Params defaults = default_params(p);
  defaults.struct_size = struct_size;
  const std::size_t known = std::min<std::size_t>(struct_size, sizeof defaults);
  std::memcpy(p, &defaults, known);
  std::memset(reinterpret_cast<unsigned char*>(p) + known, 0, struct_size - known);
}

// The optional scale as the C structs give it: a flag and a value that must be 0 without the flag.
std::optional<float> scale_from_c(float softmax_scale, std::int32_t has_softmax_scale) {
  if (has_softmax_scale == 1)
    return softmax_scale;  // a non-finite value is rejected by the validation, naming it
  if (has_softmax_scale != 0)
    throw invalid("has_softmax_scale=" + std::to_string(has_softmax_scale) + ": must be 0 or 1");
  if (!(softmax_scale == 0.f))  // NaN included: a value set without the flag is a mistake
    throw invalid(
        "softmax_scale=" + std::to_string(softmax_scale) +
        " with has_softmax_scale=0: set has_softmax_scale=1 to use it, or leave softmax_scale 0 for "
        "1/sqrt(head_dim)");
  return std::nullopt;
}

// The optional explicit tile: all four fields or none.
std::optional<flashrtc::TileConfig> tile_from_c(std::int32_t block_m, std::int32_t block_n,
                                                std::int32_t warps, std::int32_t stages) {
  if (!(block_m || block_n || warps || stages)) return std::nullopt;
  if (block_m <= 0 || block_n <= 0 || warps <= 0 || stages <= 0)
    throw invalid("block_m, block_n, warps, stages: give all four (> 0) or none");
  return flashrtc::TileConfig{block_m, block_n, warps, stages};
}

// The variants as the C structs give them: has_window says whether the bounds are used (all-zero bytes are
// "no variant"); the values themselves are checked by the C++ validation, naming them.
flashrtc::AttentionVariants variants_from_c(const flashrtc_variants& v) {
  flashrtc::AttentionVariants variants;
  if (v.has_window == 1) {
    variants.window_left = v.window_left;
    variants.window_right = v.window_right;
  } else if (v.has_window != 0) {
    throw invalid("variants.has_window=" + std::to_string(v.has_window) + ": must be 0 or 1");
  } else if (v.window_left != 0 || v.window_right != 0) {
    throw invalid("variants.window_left=" + std::to_string(v.window_left) +
                  ", window_right=" + std::to_string(v.window_right) +
                  " with has_window=0: set has_window=1 to use them (-1: unbounded), or leave them 0");
  }
  variants.softcap = v.softcap;
  variants.alibi_slopes = v.alibi_slopes;
  variants.alibi_stride_batch = v.alibi_stride_batch;
  variants.sinks = v.sinks;
  return variants;
}

flashrtc::ForwardParams from_c(const flashrtc_forward_params& p) {
  flashrtc::ForwardParams params;
  params.dtype = static_cast<flashrtc::DType>(p.dtype);
  params.batch = p.batch;
  params.seqlen_q = p.seqlen_q;
  params.seqlen_kv = p.seqlen_kv;
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.head_dim = p.head_dim;
  params.q = to_ref(p.q);
  params.k = to_ref(p.k);
  params.v = to_ref(p.v);
  params.o = to_ref(p.o);
  params.lse = p.lse;
  params.mask = static_cast<flashrtc::MaskKind>(p.mask);
  params.stream = p.stream;
  params.variants = variants_from_c(p.variants);
  params.softmax_scale = scale_from_c(p.softmax_scale, p.has_softmax_scale);
  params.config = tile_from_c(p.block_m, p.block_n, p.warps, p.stages);
  return params;
}

// A C boolean: 0 or 1, anything else refused.
bool flag_from_c(std::int32_t value, const char* name) {
  if (value != 0 && value != 1)
    throw invalid(std::string(name) + "=" + std::to_string(value) + ": must be 0 or 1");
  return value == 1;
}

flashrtc::BackwardParams from_c(const flashrtc_backward_params& p) {
  flashrtc::BackwardParams params;
  params.dtype = static_cast<flashrtc::DType>(p.dtype);
  params.batch = p.batch;
  params.seqlen_q = p.seqlen_q;
  params.seqlen_kv = p.seqlen_kv;
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.head_dim = p.head_dim;
  params.q = to_ref(p.q);
  params.k = to_ref(p.k);
  params.v = to_ref(p.v);
  params.o = to_ref(p.o);
  params.d_o = to_ref(p.d_o);
  params.lse = p.lse;
  params.d_q = to_ref(p.d_q);
  params.d_k = to_ref(p.d_k);
  params.d_v = to_ref(p.d_v);
  params.softmax_scale = scale_from_c(p.softmax_scale, p.has_softmax_scale);
  params.mask = static_cast<flashrtc::MaskKind>(p.mask);
  params.deterministic = flag_from_c(p.deterministic, "deterministic");
  params.config = tile_from_c(p.block_m, p.block_n, p.warps, p.stages);
  params.stream = p.stream;
  params.variants = variants_from_c(p.variants);
  params.d_sinks = p.d_sinks;
  return params;
}

flashrtc::KvCacheParams from_c(const flashrtc_kvcache_params& p) {
  flashrtc::KvCacheParams params;
  params.dtype = static_cast<flashrtc::DType>(p.dtype);
  params.batch = p.batch;
  params.seqlen_q = p.seqlen_q;
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.head_dim = p.head_dim;
  params.q = to_ref(p.q);
  params.k_cache = to_ref(p.k_cache);
  params.v_cache = to_ref(p.v_cache);
  params.num_pages = p.num_pages;
  params.page_size = p.page_size;
  params.block_table = p.block_table;
  params.block_table_stride = p.block_table_stride;
  params.max_pages_per_seq = p.max_pages_per_seq;
  params.cache_seqlens = p.cache_seqlens;
  params.cache_batch_idx = p.cache_batch_idx;
  params.k_new = to_ref(p.k_new);
  params.v_new = to_ref(p.v_new);
  params.seqlen_new = p.seqlen_new;
  params.o = to_ref(p.o);
  params.lse = p.lse;
  params.softmax_scale = scale_from_c(p.softmax_scale, p.has_softmax_scale);
  params.mask = static_cast<flashrtc::MaskKind>(p.mask);
  params.num_splits = p.num_splits;
  params.stream = p.stream;
  params.variants = variants_from_c(p.variants);
  params.config = tile_from_c(p.block_m, p.block_n, p.warps, p.stages);
  return params;
}

flashrtc::MergeStatesParams from_c(const flashrtc_merge_states_params& p) {
  flashrtc::MergeStatesParams params;
  params.dtype = static_cast<flashrtc::DType>(p.dtype);
  params.batch = p.batch;
  params.seqlen = p.seqlen;
  params.heads = p.heads;
  params.head_dim = p.head_dim;
  params.o_a = to_ref(p.o_a);
  params.o_b = to_ref(p.o_b);
  params.lse_a = p.lse_a;
  params.lse_b = p.lse_b;
  params.o = to_ref(p.o);
  params.lse = p.lse;
  params.stream = p.stream;
  return params;
}

// The fields the two varlen structs share, by name: C is the C struct, P the C++ one.
template <typename C, typename P>
P varlen_from_c(const C& p) {
  P params;
  params.dtype = static_cast<flashrtc::DType>(p.dtype);
  params.batch = p.batch;
  params.total_q = p.total_q;
  params.total_k = p.total_k;
  params.max_seqlen_q = p.max_seqlen_q;
  params.max_seqlen_k = p.max_seqlen_k;
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.head_dim = p.head_dim;
  params.q = to_ref(p.q);
  params.k = to_ref(p.k);
  params.v = to_ref(p.v);
  params.o = to_ref(p.o);
  params.cu_seqlens_q = p.cu_seqlens_q;
  params.cu_seqlens_k = p.cu_seqlens_k;
  params.seqused_k = p.seqused_k;
  params.lse = p.lse;
  params.softmax_scale = scale_from_c(p.softmax_scale, p.has_softmax_scale);
  params.mask = static_cast<flashrtc::MaskKind>(p.mask);
  params.config = tile_from_c(p.block_m, p.block_n, p.warps, p.stages);
  params.stream = p.stream;
  params.variants = variants_from_c(p.variants);
  return params;
}

flashrtc::VarlenForwardParams from_c(const flashrtc_varlen_forward_params& p) {
  return varlen_from_c<flashrtc_varlen_forward_params, flashrtc::VarlenForwardParams>(p);
}

flashrtc::VarlenBackwardParams from_c(const flashrtc_varlen_backward_params& p) {
  auto params = varlen_from_c<flashrtc_varlen_backward_params, flashrtc::VarlenBackwardParams>(p);
  params.d_o = to_ref(p.d_o);
  params.d_q = to_ref(p.d_q);
  params.d_k = to_ref(p.d_k);
  params.d_v = to_ref(p.d_v);
  params.d_sinks = p.d_sinks;
  params.deterministic = flag_from_c(p.deterministic, "deterministic");
  return params;
}

template <typename F>
flashrtc_status guarded(F&& body) {
  try {
    body();
    g_last_error.clear();
    return FLASHRTC_OK;
  } catch (const flashrtc::Error& e) {
    g_last_error = e.what();
    return static_cast<flashrtc_status>(static_cast<int>(e.code()));
  } catch (const std::exception& e) {
    g_last_error = std::string("flashrtc: Internal: ") + e.what();
    return FLASHRTC_ERROR_INTERNAL;
  } catch (...) {
    g_last_error = "flashrtc: Internal: unknown exception";
    return FLASHRTC_ERROR_INTERNAL;
  }
}

}  // namespace

extern "C" {

void flashrtc_forward_params_init_sized(flashrtc_forward_params* p, uint32_t struct_size) {
  init_sized(p, struct_size);
}

void flashrtc_backward_params_init_sized(flashrtc_backward_params* p, uint32_t struct_size) {
  init_sized(p, struct_size);
}

flashrtc_status flashrtc_attention_forward(const flashrtc_forward_params* p) {
  return guarded([&] { flashrtc::attention_forward(from_c(read_sized(p))); });
}

flashrtc_status flashrtc_attention_forward_with_scale(const flashrtc_forward_params* p, float softmax_scale) {
  return guarded([&] {
    flashrtc_forward_params known = read_sized(p);
    known.has_softmax_scale = 1;
    known.softmax_scale = softmax_scale;
    flashrtc::attention_forward(from_c(known));
  });
}

flashrtc_status flashrtc_attention_backward(const flashrtc_backward_params* p) {
  return guarded([&] { flashrtc::attention_backward(from_c(read_sized(p))); });
}

void flashrtc_kvcache_params_init_sized(flashrtc_kvcache_params* p, uint32_t struct_size) {
  init_sized(p, struct_size);
}

flashrtc_status flashrtc_attention_with_kvcache(const flashrtc_kvcache_params* p) {
  return guarded([&] { flashrtc::attention_with_kvcache(from_c(read_sized(p))); });
}

void flashrtc_varlen_forward_params_init_sized(flashrtc_varlen_forward_params* p, uint32_t struct_size) {
  init_sized(p, struct_size);
}

flashrtc_status flashrtc_attention_varlen_forward(const flashrtc_varlen_forward_params* p) {
  return guarded([&] { flashrtc::attention_varlen_forward(from_c(read_sized(p))); });
}

void flashrtc_varlen_backward_params_init_sized(flashrtc_varlen_backward_params* p, uint32_t struct_size) {
  init_sized(p, struct_size);
}

flashrtc_status flashrtc_attention_varlen_backward(const flashrtc_varlen_backward_params* p) {
  return guarded([&] { flashrtc::attention_varlen_backward(from_c(read_sized(p))); });
}

void flashrtc_merge_states_params_init_sized(flashrtc_merge_states_params* p, uint32_t struct_size) {
  init_sized(p, struct_size);
}

flashrtc_status flashrtc_merge_states(const flashrtc_merge_states_params* p) {
  return guarded([&] { flashrtc::merge_states(from_c(read_sized(p))); });
}

const char* flashrtc_last_error(void) {
  return g_last_error.c_str();
}

const char* flashrtc_status_name(flashrtc_status status) {
  if (status == FLASHRTC_OK) return "OK";
  return flashrtc::to_string(static_cast<flashrtc::ErrorCode>(status));
}

const char* flashrtc_version(void) {
  return FLASHRTC_VERSION_STRING;
}

}  // extern "C"

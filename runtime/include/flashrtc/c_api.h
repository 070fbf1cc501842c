#ifndef FLASHRTC_C_API_H_
#define FLASHRTC_C_API_H_
/* The C mirror of flashrtc/attention.hpp (with varlen_params.hpp) and flashrtc/attention_kvcache.hpp for
 * other languages. Functions return a status; on failure flashrtc_last_error() holds the message (per
 * thread, valid until the next call on that thread). */
#include <stdint.h>

#include "flashrtc/export.hpp"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum flashrtc_status {
  FLASHRTC_OK = 0,
  FLASHRTC_ERROR_INVALID_ARGUMENT = 1,
  FLASHRTC_ERROR_UNSUPPORTED = 2,
  FLASHRTC_ERROR_NVRTC = 3,
  FLASHRTC_ERROR_DRIVER = 4,
  FLASHRTC_ERROR_CACHE_IO = 5,
  FLASHRTC_ERROR_NO_DEVICE = 6,
  FLASHRTC_ERROR_COMPILE_DISALLOWED = 7,
  FLASHRTC_ERROR_INTERNAL = 8
} flashrtc_status;

typedef enum flashrtc_dtype {
  FLASHRTC_FLOAT32 = 0,
  FLASHRTC_FLOAT16 = 1,
  FLASHRTC_BFLOAT16 = 2
} flashrtc_dtype;
typedef enum flashrtc_mask {
  FLASHRTC_MASK_NONE = 0,
  FLASHRTC_MASK_CAUSAL_TOP_LEFT = 1,
  FLASHRTC_MASK_CAUSAL_BOTTOM_RIGHT = 2
} flashrtc_mask;

/* [batch, seq, head, dim] with element strides. */
typedef struct flashrtc_tensor {
  const void* data;
  int64_t stride_batch, stride_seq, stride_head, stride_dim;
} flashrtc_tensor;

/* Attention variants (flashrtc/attention_variants.hpp's AttentionVariants: its comments give the semantics),
 * a member of every attention call's params. All-zero bytes are the defaults: no window, no softcap, no
 * ALiBi, no sinks. No kernel serves a variant yet: a call that sets one fails with
 * FLASHRTC_ERROR_UNSUPPORTED naming it (docs/variants.md). */
typedef struct flashrtc_variants {
  int32_t has_window; /* 0: no window, and window_left, window_right must be 0; 1: the bounds below */
  float softcap;      /* 0: off; > 0: scores pass through softcap * tanh(s / softcap) */
  int64_t window_left, window_right; /* with has_window: keys each side of the diagonal, -1 unbounded */
  const float* alibi_slopes;         /* optional [Hq] or [B, Hq] float32 on the device */
  int64_t alibi_stride_batch;        /* 0 (slopes [Hq]) or >= heads_q (slopes [B, Hq]) */
  const float* sinks;                /* optional [Hq] float32 on the device: one logit per query head */
} flashrtc_variants;

/* Grows at the end: a caller states the size it was built with in struct_size (flashrtc_forward_params_init
 * sets it), the library reads only the fields inside that size and gives every later field its default, so
 * new fields need no new entry points and a binary built against an older header keeps working. */
typedef struct flashrtc_forward_params {
  uint32_t struct_size; /* sizeof(flashrtc_forward_params) as the caller knows it; at least
                           FLASHRTC_FORWARD_PARAMS_MIN_SIZE, at most FLASHRTC_FORWARD_PARAMS_MAX_SIZE */
  int32_t dtype;        /* flashrtc_dtype */
  int64_t batch, seqlen_q, seqlen_kv, heads_q, heads_kv, head_dim;
  flashrtc_tensor q, k, v, o;
  float* lse;                /* optional [B, Hq, Nq] float32 */
  float softmax_scale;       /* used when has_softmax_scale: any finite value, 0 and negative included */
  int32_t has_softmax_scale; /* 0: 1/sqrt(head_dim), and softmax_scale must be 0 */
  int32_t mask;              /* flashrtc_mask */
  /* Optional explicit tile: all four > 0 to use it, all 0 for the default. */
  int32_t block_m, block_n, warps, stages;
  void* stream; /* CUstream / cudaStream_t; NULL is the legacy default stream */
  flashrtc_variants variants; /* all zero: none */
  /* Later fields go here, each with a default of all-zero bytes. */
} flashrtc_forward_params;

/* The first layout's size (every field above): a smaller or zero struct_size is an invalid argument. A
 * struct_size beyond what this library knows is accepted when the unknown tail is all zero (fields at
 * their defaults), and is FLASHRTC_ERROR_UNSUPPORTED otherwise; above the maximum it is invalid. */
#define FLASHRTC_FORWARD_PARAMS_MIN_SIZE 264u
#define FLASHRTC_FORWARD_PARAMS_MAX_SIZE 4096u

/* Fills the first struct_size bytes of p with defaults (zeros, stride_dim 1, default scale, no tile override)
 * and sets p->struct_size (only that field when struct_size is above the maximum). For callers that cannot
 * use the inline function below (other languages). */
FLASHRTC_API void flashrtc_forward_params_init_sized(flashrtc_forward_params* p, uint32_t struct_size);
/* Defaults for the struct as this header declares it; the caller sets the rest. */
static inline void flashrtc_forward_params_init(flashrtc_forward_params* p) {
  flashrtc_forward_params_init_sized(p, (uint32_t)sizeof(flashrtc_forward_params));
}
FLASHRTC_API flashrtc_status flashrtc_attention_forward(const flashrtc_forward_params* p);
/* Deprecated (kept for one release, for callers built before the struct had has_softmax_scale): as
 * flashrtc_attention_forward with has_softmax_scale = 1 and this softmax_scale (any finite value). */
FLASHRTC_API flashrtc_status flashrtc_attention_forward_with_scale(const flashrtc_forward_params* p,
                                                                   float softmax_scale);
/* Backward: the gradients dq, dk, dv of the forward above (flashrtc/attention_backward.hpp). Grows at the end
 * like flashrtc_forward_params. */
typedef struct flashrtc_backward_params {
  uint32_t struct_size; /* sizeof(flashrtc_backward_params) as the caller knows it */
  int32_t dtype;        /* flashrtc_dtype */
  int64_t batch, seqlen_q, seqlen_kv, heads_q, heads_kv, head_dim;
  flashrtc_tensor q, k, v, o, d_o;
  const float* lse; /* required: the forward's [B, Hq, Nq] float32 */
  flashrtc_tensor d_q, d_k, d_v;
  float softmax_scale;
  int32_t has_softmax_scale;
  int32_t mask;
  int32_t deterministic; /* 0 or 1 */
  int32_t block_m, block_n, warps, stages;
  void* stream;
  flashrtc_variants variants; /* the forward's; all zero: none */
  float* d_sinks; /* written with variants.sinks (required then, NULL otherwise): [Hq] float32 gradient */
  /* Later fields go here, each with a default of all-zero bytes. */
} flashrtc_backward_params;

/* The first layout's size and the largest accepted, with the rules of the forward's. */
#define FLASHRTC_BACKWARD_PARAMS_MIN_SIZE 424u
#define FLASHRTC_BACKWARD_PARAMS_MAX_SIZE 4096u

/* Fills the first struct_size bytes of p with defaults (zeros, stride_dim 1, default scale, no tile
 * override), as flashrtc_forward_params_init_sized does. */
FLASHRTC_API void flashrtc_backward_params_init_sized(flashrtc_backward_params* p, uint32_t struct_size);
static inline void flashrtc_backward_params_init(flashrtc_backward_params* p) {
  flashrtc_backward_params_init_sized(p, (uint32_t)sizeof(flashrtc_backward_params));
}
FLASHRTC_API flashrtc_status flashrtc_attention_backward(const flashrtc_backward_params* p);
/* Attention over a KV cache (flashrtc/attention_kvcache.hpp, KvCacheParams: its comments give the semantics);
 * names follow FlashAttention's flash_attn_with_kvcache. Grows at the end like flashrtc_forward_params. */
typedef struct flashrtc_kvcache_params {
  uint32_t struct_size; /* sizeof(flashrtc_kvcache_params) as the caller knows it */
  int32_t dtype;        /* flashrtc_dtype of q, k_cache, v_cache, k_new, v_new and o */
  int64_t batch, seqlen_q, heads_q, heads_kv, head_dim;
  flashrtc_tensor q;                /* [B, Nq, Hq, d] */
  flashrtc_tensor k_cache, v_cache; /* [num_pages, page_size, Hkv, d]; written where k_new is appended */
  int64_t num_pages, page_size;
  const int32_t* block_table; /* [B, max_pages_per_seq] on the device, row stride block_table_stride; NULL:
                                 contiguous cache (one page per sequence) */
  int64_t block_table_stride, max_pages_per_seq;
  const int32_t* cache_seqlens;   /* [B] on the device: tokens before the append; NULL: full caches */
  const int32_t* cache_batch_idx; /* [B] on the device, contiguous caches only; NULL: page b */
  flashrtc_tensor k_new, v_new;   /* optional [B, seqlen_new, Hkv, d]; data NULL: no append */
  int64_t seqlen_new;
  flashrtc_tensor o;         /* [B, Nq, Hq, d], written */
  float* lse;                /* optional [B, Hq, Nq] float32 */
  float softmax_scale;       /* used when has_softmax_scale, as in flashrtc_forward_params */
  int32_t has_softmax_scale; /* 0: 1/sqrt(head_dim), and softmax_scale must be 0 */
  int32_t mask;              /* FLASHRTC_MASK_NONE or FLASHRTC_MASK_CAUSAL_BOTTOM_RIGHT */
  int32_t num_splits;        /* 0: chosen from the shapes (never from device data); else 1 to 256 */
  /* Optional explicit tile of the attention kernel: all four > 0 to use it, all 0 for the default. */
  int32_t block_m, block_n, warps, stages;
  void* stream; /* CUstream / cudaStream_t; NULL is the legacy default stream */
  flashrtc_variants variants; /* all zero: none */
  /* Later fields go here, each with a default of all-zero bytes. */
} flashrtc_kvcache_params;

/* The first layout's size and the largest accepted, with the rules of the forward's. */
#define FLASHRTC_KVCACHE_PARAMS_MIN_SIZE 400u
#define FLASHRTC_KVCACHE_PARAMS_MAX_SIZE 4096u

/* Fills the first struct_size bytes of p with defaults (zeros, stride_dim 1, default scale, no tile override,
 * num_splits 0), as flashrtc_forward_params_init_sized does. */
FLASHRTC_API void flashrtc_kvcache_params_init_sized(flashrtc_kvcache_params* p, uint32_t struct_size);
static inline void flashrtc_kvcache_params_init(flashrtc_kvcache_params* p) {
  flashrtc_kvcache_params_init_sized(p, (uint32_t)sizeof(flashrtc_kvcache_params));
}
FLASHRTC_API flashrtc_status flashrtc_attention_with_kvcache(const flashrtc_kvcache_params* p);

/* The variable-length forward (flashrtc/varlen_params.hpp, VarlenForwardParams: its comments give the rules;
 * docs/varlen.md): B sequences of their own lengths packed along the token axis, no padding; names follow
 * FlashAttention's flash_attn_varlen_func. Grows at the end like flashrtc_forward_params. */
typedef struct flashrtc_varlen_forward_params {
  uint32_t struct_size;               /* sizeof(flashrtc_varlen_forward_params) as the caller knows it */
  int32_t dtype;                      /* flashrtc_dtype of q, k, v and o */
  int64_t batch;                      /* sequences B */
  int64_t total_q, total_k;           /* rows of q (and o), of k (and v) */
  int64_t max_seqlen_q, max_seqlen_k; /* host bounds of the sequences' lengths */
  int64_t heads_q, heads_kv, head_dim;
  flashrtc_tensor q;           /* [total_q, Hq, d]: stride_seq steps one token; stride_batch is ignored */
  flashrtc_tensor k, v;        /* [total_k, Hkv, d] */
  flashrtc_tensor o;           /* [total_q, Hq, d], written for the sequences' rows only */
  const int32_t* cu_seqlens_q; /* [B + 1] on the device: prefix sums of the query lengths */
  const int32_t* cu_seqlens_k; /* [B + 1] on the device: prefix sums of the key lengths */
  const int32_t* seqused_k;    /* optional [B] on the device: keys each sequence attends; NULL: all */
  float* lse;                  /* optional [Hq, total_q] float32 */
  float softmax_scale;         /* used when has_softmax_scale, as in flashrtc_forward_params */
  int32_t has_softmax_scale;   /* 0: 1/sqrt(head_dim), and softmax_scale must be 0 */
  int32_t mask;                /* flashrtc_mask, counted from each sequence's start */
  /* Optional explicit tile: all four > 0 to use it, all 0 for the default. */
  int32_t block_m, block_n, warps, stages;
  void* stream; /* CUstream / cudaStream_t; NULL is the legacy default stream */
  flashrtc_variants variants; /* all zero: none */
  /* Later fields go here, each with a default of all-zero bytes. */
} flashrtc_varlen_forward_params;

/* The first layout's size and the largest accepted, with the rules of the forward's. */
#define FLASHRTC_VARLEN_FORWARD_PARAMS_MIN_SIZE 304u
#define FLASHRTC_VARLEN_FORWARD_PARAMS_MAX_SIZE 4096u

/* Fills the first struct_size bytes of p with defaults (zeros, stride_dim 1, default scale, no tile
 * override), as flashrtc_forward_params_init_sized does. */
FLASHRTC_API void flashrtc_varlen_forward_params_init_sized(flashrtc_varlen_forward_params* p,
                                                            uint32_t struct_size);
static inline void flashrtc_varlen_forward_params_init(flashrtc_varlen_forward_params* p) {
  flashrtc_varlen_forward_params_init_sized(p, (uint32_t)sizeof(flashrtc_varlen_forward_params));
}
FLASHRTC_API flashrtc_status flashrtc_attention_varlen_forward(const flashrtc_varlen_forward_params* p);

/* merge_states (flashrtc/attention_kvcache.hpp, MergeStatesParams): the attention over the union of two
 * disjoint key sets from each set's o and lse. Grows at the end like flashrtc_forward_params. */
typedef struct flashrtc_merge_states_params {
  uint32_t struct_size; /* sizeof(flashrtc_merge_states_params) as the caller knows it */
  int32_t dtype;        /* flashrtc_dtype of o_a, o_b and o */
  int64_t batch, seqlen, heads, head_dim;
  flashrtc_tensor o_a, o_b; /* [B, N, H, d] */
  const float* lse_a;       /* [B, H, N] float32, contiguous, natural log (-inf: no key in the set) */
  const float* lse_b;
  flashrtc_tensor o; /* [B, N, H, d], written; may be o_a or o_b */
  float* lse;        /* optional [B, H, N] float32, written; may be lse_a or lse_b */
  void* stream;
  /* Later fields go here, each with a default of all-zero bytes. */
} flashrtc_merge_states_params;

/* The first layout's size and the largest accepted, with the rules of the forward's. */
#define FLASHRTC_MERGE_STATES_PARAMS_MIN_SIZE 192u
#define FLASHRTC_MERGE_STATES_PARAMS_MAX_SIZE 4096u

FLASHRTC_API void flashrtc_merge_states_params_init_sized(flashrtc_merge_states_params* p,
                                                          uint32_t struct_size);
static inline void flashrtc_merge_states_params_init(flashrtc_merge_states_params* p) {
  flashrtc_merge_states_params_init_sized(p, (uint32_t)sizeof(flashrtc_merge_states_params));
}
FLASHRTC_API flashrtc_status flashrtc_merge_states(const flashrtc_merge_states_params* p);

/* The variable-length backward (flashrtc/attention_backward.hpp, VarlenBackwardParams in
 * flashrtc/varlen_params.hpp: its comments give the semantics): the gradients of a packed forward, always
 * deterministic. Tensors are [total, heads, d] (stride_batch unused); cu_seqlens_q, cu_seqlens_k and the
 * optional seqused_k are int32 device arrays. The tile, when given, is the main kernel's (dK, dV). Grows at
 * the end like flashrtc_forward_params. */
typedef struct flashrtc_varlen_backward_params {
  uint32_t struct_size; /* sizeof(flashrtc_varlen_backward_params) as the caller knows it */
  int32_t dtype;        /* flashrtc_dtype: fp16 or bf16 */
  int64_t batch, total_q, total_k, max_seqlen_q, max_seqlen_k, heads_q, heads_kv, head_dim;
  flashrtc_tensor q, k, v, o, d_o; /* q, o, d_o [total_q, Hq, d]; k, v [total_k, Hkv, d] */
  const float* lse;                /* required: the forward's [Hq, total_q] float32 */
  flashrtc_tensor d_q, d_k, d_v;   /* written: like q, k, v */
  const int32_t* cu_seqlens_q;     /* [B + 1] */
  const int32_t* cu_seqlens_k;     /* [B + 1] */
  const int32_t* seqused_k;        /* optional [B] */
  float softmax_scale;
  int32_t has_softmax_scale;
  int32_t mask;
  int32_t block_m, block_n, warps, stages;
  void* stream;
  flashrtc_variants variants; /* the forward's; all zero: none */
  float* d_sinks; /* written with variants.sinks (required then, NULL otherwise): [Hq] float32 gradient */
  int32_t deterministic; /* 0 (default): the fused kernel where it serves the call; 1: as flashrtc_backward_params */
  /* Later fields go here, each with a default of all-zero bytes. */
} flashrtc_varlen_backward_params;

/* The first layout's size and the largest accepted, with the rules of the forward's. */
#define FLASHRTC_VARLEN_BACKWARD_PARAMS_MIN_SIZE 464u
#define FLASHRTC_VARLEN_BACKWARD_PARAMS_MAX_SIZE 4096u

/* Fills the first struct_size bytes of p with defaults (zeros, stride_dim 1, default scale, no tile
 * override), as flashrtc_forward_params_init_sized does. */
FLASHRTC_API void flashrtc_varlen_backward_params_init_sized(flashrtc_varlen_backward_params* p,
                                                             uint32_t struct_size);
static inline void flashrtc_varlen_backward_params_init(flashrtc_varlen_backward_params* p) {
  flashrtc_varlen_backward_params_init_sized(p, (uint32_t)sizeof(flashrtc_varlen_backward_params));
}
FLASHRTC_API flashrtc_status flashrtc_attention_varlen_backward(const flashrtc_varlen_backward_params* p);
FLASHRTC_API const char* flashrtc_last_error(void);
FLASHRTC_API const char* flashrtc_status_name(flashrtc_status status);
FLASHRTC_API const char* flashrtc_version(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHRTC_C_API_H_ */

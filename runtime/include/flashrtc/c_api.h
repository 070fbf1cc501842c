#ifndef FLASHRTC_C_API_H_
#define FLASHRTC_C_API_H_
/* The C mirror of flashrtc/attention.hpp for other languages. Functions return a status; on failure
 * flashrtc_last_error() holds the message (per thread, valid until the next call on that thread). */
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

typedef enum flashrtc_dtype { FLASHRTC_FLOAT32 = 0, FLASHRTC_FLOAT16 = 1, FLASHRTC_BFLOAT16 = 2 } flashrtc_dtype;
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

typedef struct flashrtc_forward_params {
  int32_t dtype; /* flashrtc_dtype */
  int64_t batch, seqlen_q, seqlen_kv, heads_q, heads_kv, head_dim;
  flashrtc_tensor q, k, v, o;
  float* lse;            /* optional [B, Hq, Nq] float32 */
  float softmax_scale;   /* <= 0 or NaN: 1/sqrt(head_dim) */
  int32_t mask;          /* flashrtc_mask */
  void* stream;          /* CUstream / cudaStream_t */
  /* Optional explicit tile: all four > 0 to use it, all 0 for the default. */
  int32_t block_m, block_n, warps, stages;
} flashrtc_forward_params;

/* Fills p with defaults (no tile override, default scale); the caller sets the rest. */
FLASHRTC_API void flashrtc_forward_params_init(flashrtc_forward_params* p);
FLASHRTC_API flashrtc_status flashrtc_attention_forward(const flashrtc_forward_params* p);
/* As flashrtc_attention_forward, with softmax_scale taken as given (any finite value, 0 and negative
 * included) in place of p->softmax_scale, whose "<= 0 or NaN means the default" rule cannot express them.
 * A new entry point rather than a new field, so binaries built against the older struct keep working. */
FLASHRTC_API flashrtc_status flashrtc_attention_forward_with_scale(const flashrtc_forward_params* p,
                                                                    float softmax_scale);
FLASHRTC_API const char* flashrtc_last_error(void);
FLASHRTC_API const char* flashrtc_status_name(flashrtc_status status);
FLASHRTC_API const char* flashrtc_version(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHRTC_C_API_H_ */

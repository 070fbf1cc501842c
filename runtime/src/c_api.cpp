// The C API: exceptions become status codes and a per-thread message; nothing escapes extern "C".
#include "flashrtc/c_api.h"

#include <cmath>
#include <exception>
#include <string>

#include "flashrtc/attention.hpp"
#include "flashrtc/error.hpp"

namespace {

thread_local std::string g_last_error;

flashrtc::TensorRef to_ref(const flashrtc_tensor& t) {
  return {t.data, t.stride_batch, t.stride_seq, t.stride_head, t.stride_dim};
}

// Everything but the scale, whose two entry points read it differently. Throws for a null p or a
// partial tile.
flashrtc::ForwardParams from_c(const flashrtc_forward_params* p) {
  if (!p) throw flashrtc::Error(flashrtc::ErrorCode::kInvalidArgument, "params is null");
  flashrtc::ForwardParams params;
  params.dtype = static_cast<flashrtc::DType>(p->dtype);
  params.batch = p->batch;
  params.seqlen_q = p->seqlen_q;
  params.seqlen_kv = p->seqlen_kv;
  params.heads_q = p->heads_q;
  params.heads_kv = p->heads_kv;
  params.head_dim = p->head_dim;
  params.q = to_ref(p->q);
  params.k = to_ref(p->k);
  params.v = to_ref(p->v);
  params.o = to_ref(p->o);
  params.lse = p->lse;
  params.mask = static_cast<flashrtc::MaskKind>(p->mask);
  params.stream = p->stream;
  const bool any_tile = p->block_m || p->block_n || p->warps || p->stages;
  if (any_tile) {
    if (p->block_m <= 0 || p->block_n <= 0 || p->warps <= 0 || p->stages <= 0)
      throw flashrtc::Error(flashrtc::ErrorCode::kInvalidArgument,
                            "block_m, block_n, warps, stages: give all four (> 0) or none");
    params.config = flashrtc::TileConfig{p->block_m, p->block_n, p->warps, p->stages};
  }
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

void flashrtc_forward_params_init(flashrtc_forward_params* p) {
  if (!p) return;
  *p = flashrtc_forward_params{};
  p->q.stride_dim = p->k.stride_dim = p->v.stride_dim = p->o.stride_dim = 1;
  p->softmax_scale = 0.f;
}

flashrtc_status flashrtc_attention_forward(const flashrtc_forward_params* p) {
  return guarded([&] {
    flashrtc::ForwardParams params = from_c(p);
    if (p->softmax_scale > 0.f && std::isfinite(p->softmax_scale)) params.softmax_scale = p->softmax_scale;
    else if (std::isinf(p->softmax_scale))
      throw flashrtc::Error(flashrtc::ErrorCode::kInvalidArgument, "softmax_scale is infinite");
    flashrtc::attention_forward(params);
  });
}

flashrtc_status flashrtc_attention_forward_with_scale(const flashrtc_forward_params* p, float softmax_scale) {
  return guarded([&] {
    flashrtc::ForwardParams params = from_c(p);
    params.softmax_scale = softmax_scale;  // a non-finite value is rejected by the validation, naming it
    flashrtc::attention_forward(params);
  });
}

const char* flashrtc_last_error(void) { return g_last_error.c_str(); }

const char* flashrtc_status_name(flashrtc_status status) {
  if (status == FLASHRTC_OK) return "OK";
  return flashrtc::to_string(static_cast<flashrtc::ErrorCode>(status));
}

const char* flashrtc_version(void) { return FLASHRTC_VERSION_STRING; }

}  // extern "C"

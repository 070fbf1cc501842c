#include "flashrtc/attention_params.hpp"

namespace flashrtc {

TensorRef TensorRef::bnhd(const void* data, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim) {
  return {data, seqlen * heads * head_dim, heads * head_dim, head_dim, 1};
}

TensorRef TensorRef::bhnd(const void* data, std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim) {
  return {data, heads * seqlen * head_dim, head_dim, seqlen * head_dim, 1};
}

}  // namespace flashrtc

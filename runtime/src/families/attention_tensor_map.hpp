#pragma once
// TMA maps of the attention tensors for the Hopper families: a [batch, seq, head, dim] tensor as a rank-4 map
// (dim, seq, head, batch), one box being one swizzle panel of `rows` rows.
#include <cstdint>

#include "driver/tensor_map.hpp"
#include "flashrtc/attention_params.hpp"

namespace flashrtc::detail {

// panel_bytes is the swizzle span (128 or 64); a panel holds panel_bytes / element size elements of a row.
// Positions past the tensor's end read as zeros. A stride of a single-index dimension is never followed;
// it is given a valid value.
CUtensorMap attention_tensor_map(const TensorRef& t, DType dtype, std::int64_t seqlen, std::int64_t heads,
                                 std::int64_t batch, int head_dim, int rows, int panel_bytes);

}  // namespace flashrtc::detail

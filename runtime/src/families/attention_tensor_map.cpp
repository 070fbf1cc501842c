#include "families/attention_tensor_map.hpp"

namespace flashrtc::detail {

CUtensorMap attention_tensor_map(const TensorRef& t, DType dtype, std::int64_t seqlen, std::int64_t heads,
                                 std::int64_t batch, int head_dim, int rows, int panel_bytes) {
  const std::uint64_t bytes = dtype_size(dtype);
  const auto stride = [&](std::int64_t extent, std::int64_t elements) -> std::uint64_t {
    return extent > 1 ? static_cast<std::uint64_t>(elements) * bytes : 16u;
  };
  TensorMapSpec spec;
  spec.dtype = dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  spec.rank = 4;
  spec.global_address = t.data;
  spec.global_dims[0] = static_cast<std::uint64_t>(head_dim);
  spec.global_dims[1] = static_cast<std::uint64_t>(seqlen);
  spec.global_dims[2] = static_cast<std::uint64_t>(heads);
  spec.global_dims[3] = static_cast<std::uint64_t>(batch);
  spec.global_strides_bytes[0] = stride(seqlen, t.stride_seq);
  spec.global_strides_bytes[1] = stride(heads, t.stride_head);
  spec.global_strides_bytes[2] = stride(batch, t.stride_batch);
  spec.box_dims[0] = static_cast<std::uint32_t>(panel_bytes / static_cast<int>(bytes));
  spec.box_dims[1] = static_cast<std::uint32_t>(rows);
  spec.box_dims[2] = 1;
  spec.box_dims[3] = 1;
  spec.swizzle = panel_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  spec.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  spec.oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;  // zeros past the end: masked keys read as 0
  return encode_tensor_map(spec);
}

}  // namespace flashrtc::detail

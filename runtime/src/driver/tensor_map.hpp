#pragma once
// TMA descriptors (CUtensorMap, sm_90 and newer) encoded by cuTensorMapEncodeTiled, checked against the
// driver's documented rules first and memoized per spec.
#include <cuda.h>

#include <cstdint>

namespace flashrtc::detail {

constexpr unsigned kTensorMapMaxRank = 5;  // cuTensorMapEncodeTiled's limit

// The arguments of cuTensorMapEncodeTiled. Dimension 0 is the innermost, contiguous one; entries at and
// beyond rank (rank - 1 for strides) are ignored, also by == and the memo.
struct TensorMapSpec {
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  unsigned rank = 0;
  const void* global_address = nullptr;
  std::uint64_t global_dims[kTensorMapMaxRank] = {};               // elements
  std::uint64_t global_strides_bytes[kTensorMapMaxRank - 1] = {};  // of dimensions 1 .. rank - 1
  std::uint32_t box_dims[kTensorMapMaxRank] = {};                  // elements one TMA copy moves
  std::uint32_t element_strides[kTensorMapMaxRank] = {1, 1, 1, 1, 1};
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
};

bool operator==(const TensorMapSpec& a, const TensorMapSpec& b);
inline bool operator!=(const TensorMapSpec& a, const TensorMapSpec& b) {
  return !(a == b);
}

// Throws Error(kInvalidArgument) naming the first field (and its value) that breaks a rule of
// cuTensorMapEncodeTiled: rank 1..5 (>= 3 when interleaved); global_address non-null and 16-byte aligned
// (32 with CU_TENSOR_MAP_INTERLEAVE_32B); global dims 1..2^32; strides multiples of 16 (32 interleaved)
// below 2^40; box dims 1..256 with the inner box a multiple of 16 bytes and, swizzled, at most the swizzle
// span; element strides 1..8; CU_TENSOR_MAP_INTERLEAVE_32B only with CU_TENSOR_MAP_SWIZZLE_32B; the NaN
// out-of-bounds fill only for floating-point types. Packed sub-byte types are refused.
void validate_tensor_map(const TensorMapSpec& spec);

// The descriptor for spec. A spec seen before (same fields, the address included) is served from a small
// thread-safe memo without calling the driver; a new one is validated (as above) and encoded once.
// Throws Error(kInvalidArgument) for a spec that breaks a rule, Error(kDriver) when the driver refuses it,
// Error(kNoDevice) without a driver.
//
// Contract for the kernel: the 128-byte, 64-byte-aligned CUtensorMap is passed by value as a kernel
// parameter declared `const __grid_constant__ CUtensorMap` (it then lives in the parameter space, where TMA
// instructions read it; a copy in global memory would need a tensormap proxy fence). It holds
// global_address: a descriptor is valid only while that allocation is.
CUtensorMap encode_tensor_map(const TensorMapSpec& spec);

}  // namespace flashrtc::detail

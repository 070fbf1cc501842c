#pragma once
// 16-bit element types with the bit layout of CUDA's __half and __nv_bfloat16, defined here so NVRTC needs
// no toolkit headers at run time (a deployment may ship libnvrtc without the CUDA include directory). They
// name the tensor-core kernel's element type; its conversions are PTX cvt instructions (mma.cuh).

namespace flashrtc {

struct half_t {
  unsigned short bits;
};
struct bfloat16_t {
  unsigned short bits;
};

}  // namespace flashrtc

#pragma once
// How the Hopper kernels lay out a 16-bit tile's rows (constexpr, for NVRTC and the host compiler): cut into
// panels of the swizzle span, 128 bytes (64 elements) when the head dim is a multiple of 64, else 64 bytes
// (32 elements: d = 96, 160, 224). TMA writes them and the wgmma descriptors read them (wgmma.cuh).

namespace flashrtc {

constexpr int wgmma_panel_bytes(int head_dim) {
  return head_dim % 64 == 0 ? 128 : 64;
}
constexpr int wgmma_panel_elements(int head_dim) {
  return wgmma_panel_bytes(head_dim) / 2;
}
constexpr int wgmma_panels(int head_dim) {
  return head_dim / wgmma_panel_elements(head_dim);
}

}  // namespace flashrtc

#pragma once
// Asynchronous global-to-shared copies (sm_80+): tiles stream in while the block computes on earlier ones.

namespace flashrtc {

// Copies 16 bytes, or writes 16 zero bytes when !valid (rows past the sequence end must read as zeros:
// garbage there could be NaN, and 0 * NaN poisons the accumulator).
// smem_dst is a shared-window address (cvta.to.shared).
__device__ __forceinline__ void cp_async_16(unsigned smem_dst, const void* global_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(global_src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* global_src, bool valid) {
  cp_async_16(static_cast<unsigned>(__cvta_generic_to_shared(smem_dst)), global_src, valid);
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace flashrtc

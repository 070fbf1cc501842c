#pragma once
// Hopper's asynchronous machinery as small inline-PTX functions (sm_90a): mbarriers, TMA tensor copies
// between global and shared memory, proxy fences, named barriers and register reallocation. PTX ISA
// sections: "mbarrier", "cp.async.bulk.tensor", "membar/fence", "bar", "setmaxnreg".

namespace flashrtc {

// A CUtensorMap as the kernel sees it: 128 opaque bytes, passed as a `const __grid_constant__` parameter so
// the TMA unit reads it from the parameter space. (cuda.h is not available under NVRTC.)
struct alignas(64) TmaDescriptor {
  unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned shared_address(const void* ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(ptr));
}

// --- mbarrier: a phase completes when its arrivals reach the count and its expected bytes have landed.

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes barrier initialization visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// `count` arrivals at once (one thread standing for its warp group's warps).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar, unsigned count) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One arrival that also announces `bytes` the TMA copies of this phase will deliver.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Blocks until the phase of the given parity has completed. A fresh barrier is in phase 0, so waiting for
// parity 1 passes at once (how producers first wait on "empty" barriers).
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// --- TMA

__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDescriptor& map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&map)) : "memory");
}

// Copies the box at element coordinates (c0 innermost .. c3) of a rank-4 map into shared memory at dst,
// completing `bytes` of the barrier's transaction count. Out-of-bounds elements arrive as zeros.
__device__ __forceinline__ void tma_load_4d(unsigned dst, const TmaDescriptor& map, unsigned bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Copies shared memory at src to the box at (c0 .. c3); elements outside the tensor are not written.
__device__ __forceinline__ void tma_store_4d(const TmaDescriptor& map, unsigned src, int c0, int c1, int c2,
                                             int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<unsigned long long>(&map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until the committed stores have read their shared memory (it may then be reused or the block exit),
// all but the kPending most recent bulk groups.
template <int kPending = 0>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Adds `bytes` (a multiple of 16) of fp32 from shared memory into global memory element by element, as one
// asynchronous bulk operation of this thread's bulk group (committed by tma_store_commit, waited for like a
// store). Both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_reduce_add_f32(float* global, unsigned src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(global),
               "r"(src), "r"(bytes)
               : "memory");
}

// Waits until this thread's committed bulk operations have completed, writes included.
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Orders this thread's ordinary shared-memory writes before later async-proxy reads (TMA store, wgmma).
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Sets rows [first, kRows) of every panel of a tile in shared memory to 0 (panel i's row r at
// tile + (i * kRows + r) * kPanelBytes), by the 128 threads of a warp group (thread: its index in the group);
// the caller fences (fence_async_shared) and meets its group's barrier before an async-proxy read. A swizzle
// permutes the 16-byte chunks within a row: whole rows are contiguous. The varlen kernels clear the rows a TMA
// box read past their sequence's end (the next sequence's, or NaN) where a product multiplies them by 0.
template <int kRows, int kPanels, int kPanelBytes>
__device__ __forceinline__ void clear_panel_rows(unsigned tile, int first, int thread) {
  constexpr int kRowChunks = kPanelBytes / 16;  // 16-byte chunks of a panel's row
  const int per_panel = (kRows - first) * kRowChunks;
  for (int i = thread; i < per_panel * kPanels; i += 128) {
    const int panel = i / per_panel;
    const int chunk = i % per_panel;
    const unsigned address = tile + unsigned(panel * kRows + first) * kPanelBytes + unsigned(chunk) * 16u;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(address), "r"(0) : "memory");
  }
}

// --- named barriers (id 0 is __syncthreads'); threads a multiple of 32.

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives without waiting: the other threads counted by `threads` wait at named_barrier_sync.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// --- register reallocation between warp groups; every warp of a warp group must execute the same one.

template <int kRegisters>
__device__ __forceinline__ void registers_increase_to() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void registers_decrease_to() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// True in one lane of the warp (lane 0), uniformly known to the compiler as a single thread's branch.
__device__ __forceinline__ bool elect_one_lane() {
  unsigned pred = 0;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "elect.sync _|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(pred));
  return pred != 0;
}

}  // namespace flashrtc

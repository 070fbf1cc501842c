#pragma once
// The pieces of a work tile that several blocks share (TileSchedule::kStrideSplit): a block whose run ends
// inside a tile holds that tile's earlier key tiles (in visiting order) and computes them first; it leaves
// its unnormalized O, row maxima and partial row sums in its slot and raises its flag. The block that holds
// the tile's last key tiles finishes the tile: at the end of its run, when the others are long done, it
// waits for each flag and folds the slot into its own registers before its epilogue. It waits only for
// lower-numbered blocks, which raise their flags without waiting for anything: blocks are dispatched in
// order, so those run or have run, even where other work shares the GPU (CUB's decoupled look-back relies
// on the same).
//
// The work buffer (the launch's; its layout and size: WgmmaForwardShape's split_* functions): one flag per
// block and consumer warp group (zeroed before the launch), then from slots_offset one slot per block and
// group of kChunks x 128 float4: chunk c of thread t at c * 128 + t, so a warp's stores are contiguous.
// Chunk c < kChunks - 1 is acc_o[4c .. 4c + 3], the last one (m_0, m_1, l_0, l_1).
#include "flashrtc/online_softmax.cuh"

namespace flashrtc {

template <int kChunks, int kGroups>
struct SplitTilePartials {
  unsigned* flags;
  float4* slots;

  __device__ SplitTilePartials(unsigned* work, unsigned long long slots_offset)
      : flags(work), slots(reinterpret_cast<float4*>(reinterpret_cast<char*>(work) + slots_offset)) {}

  __device__ __forceinline__ unsigned* flag(int block, int group) const {
    return flags + block * kGroups + group;
  }
  // Thread t's first chunk in the slot of `block` and `group`.
  __device__ __forceinline__ float4* slot(int block, int group, int t) const {
    return slots + static_cast<long long>(block * kGroups + group) * kChunks * 128 + t;
  }

  // By each of the group's 128 threads (t = its index in the group), then the group's named barrier `bar`.
  template <int kOFloats>
  __device__ __forceinline__ void store(int block, int group, int t, int bar, const float (&acc_o)[kOFloats],
                                        const float (&m)[2], const float (&l)[2]) const {
    static_assert(kOFloats == 4 * (kChunks - 1), "a consumer thread's O accumulators");
    float4* const mine = slot(block, group, t);
#pragma unroll
    for (int c = 0; c < kChunks - 1; ++c)
      __stcg(mine + c * 128, make_float4(acc_o[4 * c], acc_o[4 * c + 1], acc_o[4 * c + 2], acc_o[4 * c + 3]));
    __stcg(mine + (kChunks - 1) * 128, make_float4(m[0], m[1], l[0], l[1]));
    // The group's stores, then one release of the flag (the bar.sync orders the others' stores before it).
    asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory");
    if (t == 0)
      asm volatile("st.release.gpu.global.u32 [%0], 1;\n" ::"l"(flag(block, group)) : "memory");
  }

  // By each of the group's 128 threads: waits for block `block`'s flag, then folds its slot into this
  // thread's O accumulators, maxima and partial sums (rows h = 0, 1: acc_o[4c + e] is row e / 2's).
  template <int kOFloats>
  __device__ __forceinline__ void merge(int block, int group, int t, int bar, float (&acc_o)[kOFloats],
                                        float (&m)[2], float (&l)[2]) const {
    static_assert(kOFloats == 4 * (kChunks - 1), "a consumer thread's O accumulators");
    if (t == 0) {
      const unsigned* const raised = flag(block, group);
      unsigned ready = 0;
      do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(ready) : "l"(raised) : "memory");
      while (ready == 0);
    }
    asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory");
    const float4* const theirs = slot(block, group, t);
    const float4 ml = __ldcg(theirs + (kChunks - 1) * 128);
    const float other_m[2] = {ml.x, ml.y};
    const float other_l[2] = {ml.z, ml.w};
    float mine_scale[2], other_scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = fmaxf(m[h], other_m[h]);
      const float m_use = m_new == negative_infinity() ? 0.f : m_new;  // both -inf: weights 0, not NaN
      mine_scale[h] = fast_exp2(m[h] - m_use);
      other_scale[h] = fast_exp2(other_m[h] - m_use);
      m[h] = m_new;
      l[h] = l[h] * mine_scale[h] + other_l[h] * other_scale[h];
    }
#pragma unroll
    for (int c = 0; c < kChunks - 1; ++c) {
      const float4 o = __ldcg(theirs + c * 128);
      acc_o[4 * c] = acc_o[4 * c] * mine_scale[0] + o.x * other_scale[0];
      acc_o[4 * c + 1] = acc_o[4 * c + 1] * mine_scale[0] + o.y * other_scale[0];
      acc_o[4 * c + 2] = acc_o[4 * c + 2] * mine_scale[1] + o.z * other_scale[1];
      acc_o[4 * c + 3] = acc_o[4 * c + 3] * mine_scale[1] + o.w * other_scale[1];
    }
  }
};

}  // namespace flashrtc

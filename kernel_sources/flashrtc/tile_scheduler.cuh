#pragma once
// How the thread blocks of a warp-specialized kernel share out its work tiles, fixed at compile time:
//   kOneTile  a grid of one block per tile: block b takes tile b alone, and the hardware hands the next
//             block to the first SM that frees up.
//   kStride   a persistent grid: block b takes tiles b, b + gridDim.x, ...: right where every tile costs
//             the same.
//   kDynamic  a persistent grid: block b takes tile b, then the next unclaimed one from a global counter,
//             in tile order (the longest first under a causal mask): a block that finishes early takes
//             more, as the hardware does for a grid of one block per tile, while the ring of loads runs on
//             across tiles. The producer thread claims each tile and hands it to the consumer threads
//             through shared memory.
// The persistent forms are correct for any grid size; a persistent launch gives one block per SM.
#include "flashrtc/sm90_async.cuh"

namespace flashrtc {

enum class TileSchedule { kOneTile, kStride, kDynamic };

template <TileSchedule kSchedule, int kConsumerThreads>
struct TileScheduler {
  int num_tiles;
  unsigned* counter;  // kDynamic: zeroed before the launch, counts the tiles claimed past the first wave
  unsigned slots;     // kDynamic: two 32-bit words of shared memory, the tile of each parity of `local`

  static constexpr bool kLoops = kSchedule != TileSchedule::kOneTile;
  // Named barriers: "full" 6 and 7, one per slot, the producer arrives on after writing the slot and the
  // consumers wait on before reading it; "empty" 8 and 9, the consumers arrive on after reading and the
  // producer waits on before writing the slot again (the kernels use 1-5 for turns and epilogues). A
  // barrier counts warps: the producer thread's arrival counts its warp, whose other lanes have exited.
  static constexpr int kFullBarrier = 6;
  static constexpr int kEmptyBarrier = 8;
  static constexpr int kSlotThreads = 32 + kConsumerThreads;

  // Called by the producer thread, the one live lane of its warp: fn(tile, local) for each of the block's
  // tiles, local counting them from 0.
  template <typename Fn>
  __device__ __forceinline__ void produce(Fn&& fn) const {
    if constexpr (kSchedule == TileSchedule::kOneTile) {
      fn(static_cast<int>(blockIdx.x), 0);
    } else if constexpr (kSchedule == TileSchedule::kStride) {
      stride(fn);
    } else {
      unsigned tile = blockIdx.x;  // unsigned: tile + gridDim.x cannot wrap below 2^32
      for (int local = 0;; ++local) {
        publish(local, tile);
        if (tile >= static_cast<unsigned>(num_tiles)) {
          // The consumers' arrival after reading the last real tile's slot, which no later write waits for.
          if (local > 0) producer_sync(kEmptyBarrier + ((local - 1) & 1));
          return;
        }
        fn(static_cast<int>(tile), local);
        // Claimed once this tile's loads are issued (claiming before them measured 2-8% slower at long
        // causal sequences on an H200: a block then holds two tiles the others could take).
        tile = gridDim.x + atomicAdd(counter, 1u);
      }
    }
  }

  // Called by every consumer thread: fn(tile, local) for the same tiles as produce's.
  template <typename Fn>
  __device__ __forceinline__ void consume(Fn&& fn) const {
    if constexpr (kSchedule == TileSchedule::kOneTile) {
      fn(static_cast<int>(blockIdx.x), 0);
    } else if constexpr (kSchedule == TileSchedule::kStride) {
      stride(fn);
    } else {
      for (int local = 0;; ++local) {
        unsigned tile;
        named_barrier_sync(kFullBarrier + (local & 1), kSlotThreads);
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(tile) : "r"(slots + 4u * (local & 1)) : "memory");
        if (tile >= static_cast<unsigned>(num_tiles)) return;
        named_barrier_arrive(kEmptyBarrier + (local & 1), kSlotThreads);
        fn(static_cast<int>(tile), local);
      }
    }
  }

 private:
  // Not bar.sync / bar.arrive: their .aligned forms need every lane of the warp.
  __device__ __forceinline__ static void producer_sync(int barrier) {
    asm volatile("barrier.cta.sync %0, %1;\n" ::"r"(barrier), "n"(kSlotThreads) : "memory");
  }
  template <typename Fn>
  __device__ __forceinline__ void stride(Fn&& fn) const {
    for (int tile = blockIdx.x, local = 0; tile < num_tiles; tile += gridDim.x, ++local) fn(tile, local);
  }
  __device__ __forceinline__ void publish(int local, unsigned tile) const {
    if (local >= 2) producer_sync(kEmptyBarrier + (local & 1));
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(slots + 4u * (local & 1)), "r"(tile) : "memory");
    asm volatile("barrier.cta.arrive %0, %1;\n" ::"r"(kFullBarrier + (local & 1)), "n"(kSlotThreads) : "memory");
  }
};

}  // namespace flashrtc

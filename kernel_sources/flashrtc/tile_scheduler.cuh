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
//             through shared memory and mbarriers.
// The persistent forms are correct for any grid size; a persistent launch gives one block per SM.
#include "flashrtc/sm90_async.cuh"

namespace flashrtc {

enum class TileSchedule { kOneTile, kStride, kDynamic };

template <TileSchedule kSchedule, int kConsumerThreads>
struct TileScheduler {
  int num_tiles;
  unsigned* counter;  // kDynamic: zeroed before the launch, counts the tiles claimed past the first wave
  unsigned slots;     // kDynamic: kBytes of shared memory, 8-byte aligned: the slots, then their mbarriers

  static constexpr bool kLoops = kSchedule != TileSchedule::kOneTile;
  // Two 32-bit slots, the tile of each parity of `local`, then per slot a "full" mbarrier the producer
  // arrives on after writing it and an "empty" one each consumer thread arrives on after reading it. Named
  // barriers would not do: they count arrivals, not phases, so a consumer group running two tiles ahead of
  // another (groups without ping-pong turns are not held together) could complete the older tile's
  // barrier with its own arrival and read a slot before it is written (racecheck caught this with three
  // consumer groups).
  static constexpr unsigned kBytes = 8 + 4 * 8;

  // By one thread, before the block synchronizes and any other use.
  __device__ __forceinline__ void init() const {
    if constexpr (kSchedule == TileSchedule::kDynamic)
      for (int s = 0; s < 2; ++s) {
        mbarrier_init(full(s), 1);
        mbarrier_init(empty(s), kConsumerThreads);
      }
  }

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
        // The slot's previous tile (local - 2) has been read by every consumer thread: a fresh barrier passes.
        mbarrier_wait(empty(local & 1), ((local >> 1) & 1) ^ 1);
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(slots + 4u * (local & 1)), "r"(tile) : "memory");
        mbarrier_arrive(full(local & 1));
        if (tile >= static_cast<unsigned>(num_tiles)) return;
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
        mbarrier_wait(full(local & 1), (local >> 1) & 1);
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(tile) : "r"(slots + 4u * (local & 1)) : "memory");
        if (tile >= static_cast<unsigned>(num_tiles)) return;
        // Every thread arrives: an arrival releases its own thread's read only (one lane's, after
        // __syncwarp, left racecheck reporting the other lanes' reads against the next write).
        mbarrier_arrive(empty(local & 1));
        fn(static_cast<int>(tile), local);
      }
    }
  }

 private:
  __device__ __forceinline__ unsigned full(int slot) const { return slots + 8u + 8u * slot; }
  __device__ __forceinline__ unsigned empty(int slot) const { return slots + 24u + 8u * slot; }
  template <typename Fn>
  __device__ __forceinline__ void stride(Fn&& fn) const {
    for (int tile = blockIdx.x, local = 0; tile < num_tiles; tile += gridDim.x, ++local) fn(tile, local);
  }
};

}  // namespace flashrtc

#pragma once
// How the thread blocks of a warp-specialized kernel share out its work tiles, fixed at compile time:
//   kOneTile  a grid of one block per tile: block b takes tile b alone, and the hardware hands the next
//             block to the first SM that frees up.
//   kStride   a persistent grid: block b takes tiles b, b + gridDim.x, ...: right where every tile costs
//             the same.
//   kStrideSplit  as kStride, but the tiles from whole_tiles on (the partial last round) are cut into their
//             key tiles, and block b takes the b-th of gridDim.x equal runs of them (stream-K): a run may
//             start or end inside a tile, so the call ends together on every block rather than with the
//             last round's blocks busy and the others idle. A block takes its run from the end down: the
//             piece of a tile shared with lower-numbered blocks comes last, so the block that merges the
//             pieces (split_tile_partials.cuh) waits only for lower-numbered blocks, which computed theirs
//             first, without waiting for anything.
//   kDynamic  a persistent grid: block b takes tile b, then the next unclaimed one from a global counter,
//             in tile order (the longest first under a causal mask): a block that finishes early takes
//             more, as the hardware does for a grid of one block per tile, while the ring of loads runs on
//             across tiles. The producer thread claims each tile and hands it to the consumer threads
//             through shared memory and mbarriers.
// The persistent forms are correct for any grid size; a persistent launch gives one block per SM.
#include "flashrtc/sm90_async.cuh"

namespace flashrtc {

enum class TileSchedule { kOneTile, kStride, kStrideSplit, kDynamic };

// One unit of a block's work: tile `tile`, the block's local-th unit, and the key tiles [key_begin, key_end)
// of it in the kernel's visiting order (0 is the first visited); key_end = kAllKeyTiles: all of them.
struct WorkTile {
  static constexpr int kAllKeyTiles = 0x7fffffff;
  int tile, local, key_begin, key_end;
};

template <TileSchedule kSchedule, int kConsumerThreads>
struct TileScheduler {
  int num_tiles;
  unsigned* counter;  // kDynamic: zeroed before the launch, counts the tiles claimed past the first wave
  unsigned slots;     // kDynamic: kBytes of shared memory, 8-byte aligned: the slots, then their mbarriers
  int whole_tiles;    // kStrideSplit: the tiles before it are taken whole, the rest cut into key tiles
  int key_tiles;      // kStrideSplit: key tiles per tile
  int run;            // kStrideSplit: block b takes run key tiles,
  int longer_runs;    // one more where b < longer_runs

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

  // Called by the producer thread, the one live lane of its warp: fn(WorkTile) for each of the block's
  // units, local counting them from 0.
  template <typename Fn>
  __device__ __forceinline__ void produce(Fn&& fn) const {
    if constexpr (kSchedule == TileSchedule::kOneTile) {
      fn(WorkTile{static_cast<int>(blockIdx.x), 0, 0, WorkTile::kAllKeyTiles});
    } else if constexpr (kSchedule == TileSchedule::kStrideSplit) {
      // The whole tiles' loop, then the run's: fn twice in the code (the producer's is short), each loop
      // holding only its own state in the producer's 24 registers (one loop over both spilled them).
      int local = 0;
      for (int tile = blockIdx.x; tile < whole_tiles; tile += gridDim.x, ++local)
        fn(WorkTile{tile, local, 0, WorkTile::kAllKeyTiles});
      const int begin = split_begin(blockIdx.x);
      for (int end = split_begin(blockIdx.x + 1); end > begin; ++local) {
        const WorkTile w = split_unit(begin, end, local);
        fn(w);
        end -= w.key_end - w.key_begin;
      }
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
        fn(WorkTile{static_cast<int>(tile), local, 0, WorkTile::kAllKeyTiles});
        // Claimed once this tile's loads are issued (claiming before them measured 2-8% slower at long
        // causal sequences on an H200: a block then holds two tiles the others could take).
        tile = gridDim.x + atomicAdd(counter, 1u);
      }
    }
  }

  // Called by every consumer thread: fn(WorkTile) for the same units as produce's, from one call site (the
  // consumers' body is long: once in the code).
  template <typename Fn>
  __device__ __forceinline__ void consume(Fn&& fn) const {
    if constexpr (kSchedule == TileSchedule::kOneTile) {
      fn(WorkTile{static_cast<int>(blockIdx.x), 0, 0, WorkTile::kAllKeyTiles});
    } else if constexpr (kSchedule != TileSchedule::kDynamic) {
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
        fn(WorkTile{static_cast<int>(tile), local, 0, WorkTile::kAllKeyTiles});
      }
    }
  }

  // kStrideSplit: the first key-tile unit of block b's run over the split tiles (unit u is key tile
  // u % key_tiles of split tile u / key_tiles); block b's run ends where block b + 1's begins.
  __device__ __forceinline__ int split_begin(int block) const {
    return block * run + min(block, longer_runs);
  }

 private:
  // kStrideSplit: the last piece of what remains of a run, [begin, end): from the start of the tile that holds
  // unit end - 1, or from begin, up to end.
  __device__ __forceinline__ WorkTile split_unit(int begin, int end, int local) const {
    const int t = (end - 1) / key_tiles;
    return WorkTile{whole_tiles + t, local, max(begin - t * key_tiles, 0), end - t * key_tiles};
  }
  __device__ __forceinline__ unsigned full(int slot) const { return slots + 8u + 8u * slot; }
  __device__ __forceinline__ unsigned empty(int slot) const { return slots + 24u + 8u * slot; }
  // One call site for fn, which the kernels inline: its body once in the code. Under kStrideSplit `pos` is a
  // tile below `whole`, then whole + the end of what remains of the block's run.
  template <typename Fn>
  __device__ __forceinline__ void stride(Fn&& fn) const {
    if constexpr (kSchedule != TileSchedule::kStrideSplit) {
      for (int tile = blockIdx.x, local = 0; tile < num_tiles; tile += gridDim.x, ++local)
        fn(WorkTile{tile, local, 0, WorkTile::kAllKeyTiles});
    } else {
      const int whole = whole_tiles;
      const auto run_end = [&]() { return whole + split_begin(blockIdx.x + 1); };
      int pos = blockIdx.x;
      if (pos >= whole) pos = run_end();
      for (int local = 0;; ++local) {
        WorkTile w{pos, local, 0, WorkTile::kAllKeyTiles};
        if (pos >= whole) {
          const int begin = split_begin(blockIdx.x);
          if (pos - whole <= begin) return;
          w = split_unit(begin, pos - whole, local);
          pos -= w.key_end - w.key_begin;
        } else {
          pos += gridDim.x;
          if (pos >= whole) pos = run_end();
        }
        fn(w);
      }
    }
  }
};

}  // namespace flashrtc

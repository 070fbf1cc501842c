#pragma once
// A value the optimizer cannot see through. Inside a loop, what is computed from it stays inside the loop:
// the compiler cannot hoist it into registers held across the loop's other work (where, in a persistent
// kernel, 64 epilogue addresses hoisted out of the tile loop would otherwise spill the main loop's
// accumulators).

namespace flashrtc {

__device__ __forceinline__ unsigned opaque(unsigned x) {
  unsigned y;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ int opaque(int x) { return static_cast<int>(opaque(static_cast<unsigned>(x))); }

}  // namespace flashrtc

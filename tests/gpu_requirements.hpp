#pragma once
// Test cases of the gpu suites that need a GPU generation say so with a decorator:
//   TEST_CASE("..." * FLASHRTC_NEEDS_SM90A)   wgmma and setmaxnreg kernels (sm_90a: H100, H200)
//   TEST_CASE("..." * FLASHRTC_NEEDS_SM90)    clusters and TMA (sm_90 and newer)
// gpu_test_main.cpp leaves them out on other GPUs, names how many and why, and doctest counts them as
// skipped; a suite whose every case is left out exits 77 (ctest: skipped), never as passed.
#include <doctest/doctest.h>

#define FLASHRTC_NEEDS_SM90A doctest::test_suite("needs-sm_90a")
#define FLASHRTC_NEEDS_SM90 doctest::test_suite("needs-sm_90")

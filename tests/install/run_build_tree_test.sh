#!/usr/bin/env bash
# Builds host/example and an externally registered kernel family (external_family/) against the build tree
# alone, the way an outside project would before installing (find_package(flashrtc) with flashrtc_DIR, or
# CMAKE_PREFIX_PATH, naming the build dir), and runs the example for two archs without launching anything:
# each must warm the kernel its arch's call runs (wgmma on sm_90a, mma on sm_80). Usage:
#   run_build_tree_test.sh <build dir> <source dir>
set -euo pipefail
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/flashrtc-build-tree-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

source "$source_dir/tests/install/consumer_steps.sh"

step "configure and build host/example with flashrtc_DIR=$build_dir"
build_example -Dflashrtc_DIR="$build_dir"
expect_library_under "$build_dir"

for pair in sm_90a:wgmma sm_80:mma; do
  arch=${pair%%:*} family=${pair#*:}
  step "the example for $arch warms the $family kernel"
  FLASHRTC_CACHE_DIR=$work/cache-$arch "$work/example/app" "$arch" | tee "$work/app-$arch.out"
  expect "$arch: $family kernel " "$work/app-$arch.out"
  # Read back from the disk cache through flashrtc::tools: the one entry is that family's, for that arch.
  expect "cached: $family $arch d=128" "$work/app-$arch.out"
  [[ $(grep -c '^cached: ' "$work/app-$arch.out") == 1 ]] || { echo "FAILED: one cache entry expected"; exit 1; }
done

step "a kernel family registered from outside, with CMAKE_PREFIX_PATH=$build_dir"
build_external_family -DCMAKE_PREFIX_PATH="$build_dir"
FLASHRTC_CACHE_DIR=$work/cache-external "$work/external_family/external_family" \
  "$source_dir/tests/cpu/data/toy_copy_v.cuh"
echo "PASS"

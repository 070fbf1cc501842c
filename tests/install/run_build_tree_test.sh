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

step() { echo "== $*"; }
quiet() {  # runs a command, showing its output only when it fails
  local log=$work/step.log
  if ! "$@" >"$log" 2>&1; then cat "$log"; echo "FAILED: $*"; exit 1; fi
}
expect() {  # expect <text> <file>: the file holds a line with text
  grep -qF -- "$1" "$2" || { cat "$2"; echo "FAILED: no line with '$1' above"; exit 1; }
}

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

step "configure and build host/example with flashrtc_DIR=$build_dir"
quiet cmake -S "$source_dir/host/example" -B "$work/example" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -Dflashrtc_DIR="$build_dir"
quiet cmake --build "$work/example"
library=$(ldd "$work/example/app" | awk '/libflashrtc\.so/ {print $3}')
case $library in
  "$build_dir"/*) echo "app links $library" ;;
  *) echo "FAILED: app resolves libflashrtc to '$library', outside $build_dir"; exit 1 ;;
esac

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
quiet cmake -S "$source_dir/tests/install/external_family" -B "$work/external_family" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$build_dir"
quiet cmake --build "$work/external_family"
FLASHRTC_CACHE_DIR=$work/cache-external "$work/external_family/external_family" \
  "$source_dir/tests/cpu/data/toy_copy_v.cuh"
echo "PASS"

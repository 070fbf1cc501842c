#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds host/example and an externally registered kernel family
# (external_family/) against it the way an outside project would (find_package(flashrtc)), and runs them and
# the installed `flashrtc` command. Usage:
#   run_install_test.sh <build dir> <source dir>
set -euo pipefail
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/flashrtc-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
export FLASHRTC_CACHE_DIR=$work/cache

step() { echo "== $*"; }
quiet() {  # runs a command, showing its output only when it fails
  local log=$work/step.log
  if ! "$@" >"$log" 2>&1; then cat "$log"; echo "FAILED: $*"; exit 1; fi
}

step "install into $prefix"
quiet cmake --install "$build_dir" --prefix "$prefix"

step "configure and build host/example against the installed package"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
quiet cmake -S "$source_dir/host/example" -B "$work/example" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix"
quiet cmake --build "$work/example"

# The example must resolve libflashrtc from the prefix, not from the build tree it was installed from.
library=$(ldd "$work/example/app" | awk '/libflashrtc/ {print $3}')
case $library in
  "$prefix"/*) echo "app links $library" ;;
  *) echo "FAILED: app resolves libflashrtc to '$library', outside $prefix"; exit 1 ;;
esac

step "run the example"
"$work/example/app"

step "a kernel family registered from outside, built against the installed library alone"
quiet cmake -S "$source_dir/tests/install/external_family" -B "$work/external_family" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix"
quiet cmake --build "$work/external_family"
"$work/external_family/external_family" "$source_dir/tests/cpu/data/toy_copy_v.cuh"

if [[ -x $prefix/bin/flashrtc ]]; then  # absent when configured with -DFLASHRTC_BUILD_HOST=OFF
  step "run the installed flashrtc command"
  "$prefix/bin/flashrtc" info
fi
echo "PASS"

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

source "$source_dir/tests/install/consumer_steps.sh"

step "install into $prefix"
quiet cmake --install "$build_dir" --prefix "$prefix"

step "configure and build host/example against the installed package"
build_example -DCMAKE_PREFIX_PATH="$prefix"
# The example must resolve libflashrtc from the prefix, not from the build tree it was installed from.
expect_library_under "$prefix"

step "run the example"
"$work/example/app"

step "a kernel family registered from outside, built against the installed library alone"
build_external_family -DCMAKE_PREFIX_PATH="$prefix"
"$work/external_family/external_family" "$source_dir/tests/cpu/data/toy_copy_v.cuh"

if [[ -x $prefix/bin/flashrtc ]]; then  # absent when configured with -DFLASHRTC_BUILD_HOST=OFF
  step "run the installed flashrtc command"
  "$prefix/bin/flashrtc" info
fi
echo "PASS"

#!/usr/bin/env bash
# Copies what the GPU machine needs into .devbuild/ (git-ignored; name it in the device tool's carry):
# the flashrtc command, the runtime library, the gpu test binaries and the peers' benchmark script.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rm -rf .devbuild && mkdir -p .devbuild
cp -a "$build"/host/flashrtc/flashrtc "$build"/runtime/libflashrtc.so* .devbuild/
find "$build"/tests -maxdepth 1 -type f -name 'gpu_*' -perm -u+x -exec cp {} .devbuild/ \;
cp ../shared/bench/sdpa_peers.py .devbuild/
strip --strip-unneeded .devbuild/flashrtc .devbuild/gpu_* .devbuild/libflashrtc.so.* 2>/dev/null || true
du -sh .devbuild

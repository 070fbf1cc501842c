#!/usr/bin/env bash
# Copies what the GPU machine needs into .devbuild/ (git-ignored; name it in the device tool's carry):
# the flashrtc command, the runtime library, the gpu test binaries and scripts, the peers' benchmark script; and in
# .devbuild/python/ the Python package (carrying its own copy of the library, where it looks first), its
# gpu tests with the skip helper they import, bench/compare.py and the peers' script beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rm -rf .devbuild && mkdir -p .devbuild
cp -a "$build"/host/flashrtc/flashrtc "$build"/runtime/libflashrtc.so* "$build"/tools/libflashrtc_tools.so* .devbuild/
find "$build"/tests -maxdepth 1 -type f -name 'gpu_*' -perm -u+x -exec cp {} .devbuild/ \;
cp ../shared/bench/sdpa_peers.py .devbuild/
cp tests/gpu/*.sh .devbuild/
mkdir -p .devbuild/python/flashrtc
cp python/flashrtc/*.py .devbuild/python/flashrtc/
cp -L "$build"/runtime/libflashrtc.so.0 .devbuild/python/flashrtc/
cp python/tests/test_binding_gpu.py python/tests/test_transformers_gpu.py python/tests/test_autograd_gpu.py \
  python/tests/test_training_gpu.py python/tests/test_kvcache_gpu.py python/tests/test_varlen_gpu.py \
  python/tests/gpu_skip.py \
  bench/compare.py bench/sustained.py bench/host_overhead.py ../shared/bench/sdpa_peers.py .devbuild/python/
cp "$build"/bench/flashrtc_host_bench .devbuild/
strip --strip-unneeded .devbuild/flashrtc .devbuild/flashrtc_host_bench .devbuild/gpu_* .devbuild/libflashrtc*.so.* \
  .devbuild/python/flashrtc/libflashrtc.so.0 2>/dev/null || true
du -sh .devbuild

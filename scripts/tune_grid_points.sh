#!/bin/bash
# Runs on the GPU machine after scripts/stage_device_build.sh: full-space tunes at standard-grid shapes
# (B = 16384 / N, H = 2048 / d) against the built-in defaults, into a scratch tuning database. JSON rows to $OUT.
OUT=${OUT:-/tmp/flashrtc-out}; mkdir -p "$OUT"
D=$PWD/.devbuild; FR=$D/flashrtc; export LD_LIBRARY_PATH=$D FLASHRTC_CACHE_DIR=/tmp/fc FLASHRTC_TUNE_DB=/tmp/tunedb.json
while read dt d n mask; do
  [ -z "$dt" ] && continue
  echo "=== $dt d=$d N=$n $mask"
  "$FR" tune --dtype $dt --head-dim $d --seqlen $n --batch $((16384 / n)) --heads $((2048 / d)) --mask $mask \
    --space full --top 6 --output "$OUT/tune_${dt}_d${d}_n${n}_${mask}.json" 2>&1 | grep -E "^ +[0-9]+ |winner|default:|FAIL|error"
done <<LIST
bf16 128 512 none
fp16 128 512 none
bf16 128 512 causal
bf16 64 512 none
bf16 64 512 causal
bf16 96 4096 none
bf16 96 4096 causal
bf16 256 4096 none
bf16 256 4096 causal
bf16 128 4096 causal
LIST

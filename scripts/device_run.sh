#!/usr/bin/env bash
# Runs on the GPU machine (device tool) from the repo root, after scripts/stage_device_build.sh here:
#   gpu test suites, `flashrtc run --check`, and flashrtc's timings beside the peers' (same run, same GPU).
# Usage: scripts/device_run.sh [tests] [check] [bench] [sweep] [mma] [sass]   (default: the first four).
# Logs go to $OUT.
set -uo pipefail
D=$PWD/.devbuild
OUT=${OUT:-/tmp/flashrtc-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$D:${LD_LIBRARY_PATH:-}
export FLASHRTC_CACHE_DIR=/tmp/flashrtc-cache
export PYTHONUNBUFFERED=1
steps=${*:-tests check bench sweep}
FR="$D/flashrtc"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
"$FR" info | tee -a "$OUT/gpu.txt"

if [[ " $steps " == *" tests "* ]]; then
  for t in "$D"/gpu_*; do
    log="$OUT/$(basename "$t").log"
    echo "== $(basename "$t")"
    FLASHRTC_LOG_LEVEL=error "$t" >"$log" 2>&1
    echo "exit $?" | tee -a "$log"
    grep -E "^  logged:|FAIL" "$log" | sort -u | head -n 20
    tail -n 4 "$log"
  done
fi

if [[ " $steps " == *" check "* ]]; then
  for dt in fp32 fp16 bf16; do
    for mask in none causal; do
      "$FR" run --batch 2 --heads 16 --seqlen 4096 --head-dim 128 --dtype $dt --mask $mask --check --iters 5 2>&1 | tee -a "$OUT/check.log"
    done
  done
  "$FR" run --batch 2 --heads 16 --kv-heads 4 --seqlen 1000 --kv-seqlen 3000 --head-dim 64 --dtype bf16 --mask causal-br --layout bhnd --check 2>&1 | tee -a "$OUT/check.log"
fi

if [[ " $steps " == *" bench "* ]]; then
  # The issue's fp32 point: B=2, H=16, N=4096, d in {64, 128}; layout bhnd like the peers' tensors.
  for d in 64 128; do
    for c in "" "--causal"; do
      python3 "$D/sdpa_peers.py" --shape 2,16,4096,$d --dtype fp32 $c --providers sdpa-efficient,sdpa-math 2>&1 | tee -a "$OUT/peers_fp32.jsonl"
    done
    for mask in none causal; do
      "$FR" run --batch 2 --heads 16 --seqlen 4096 --head-dim $d --dtype fp32 --mask $mask --layout bhnd --iters 30 2>&1 | tee -a "$OUT/flashrtc_fp32.log"
    done
  done
  for dt in bf16 fp16; do
    python3 "$D/sdpa_peers.py" --shape 2,16,4096,128 --dtype $dt --providers sdpa-flash,sdpa-efficient 2>&1 | tee -a "$OUT/peers_16bit.jsonl"
    "$FR" run --batch 2 --heads 16 --seqlen 4096 --head-dim 128 --dtype $dt --layout bhnd --iters 30 2>&1 | tee -a "$OUT/flashrtc_16bit.log"
  done
fi

if [[ " $steps " == *" sweep "* ]]; then
  # Tile sweep for the fp32 defaults: one line per config (the tuner of a later issue does this properly).
  for d in 32 64 128 256; do
    for cfg in "64 64 8 1" "64 64 4 1" "64 64 4 2" "64 32 4 1" "64 32 8 1" "128 64 8 1" "128 32 8 1" \
               "128 64 4 1" "64 128 8 1" "128 128 8 1" "128 32 4 1" "128 64 16 1"; do
      set -- $cfg
      echo -n "d=$d block_m=$1 block_n=$2 warps=$3 stages=$4: "
      "$FR" run --batch 2 --heads 16 --seqlen 4096 --head-dim $d --dtype fp32 --layout bhnd --iters 20 \
        --block-m $1 --block-n $2 --warps $3 --stages $4 2>&1 | grep -E "TFLOP|error" | tr '\n' ' '
      echo
    done 2>&1 | tee -a "$OUT/sweep_fp32.log"
  done
fi

if [[ " $steps " == *" mma "* ]]; then
  # Tensor-core family: peers and flashrtc on standard-grid points (B = 16384 / N, H = 2048 / d), bhnd like
  # the peers' tensors, then a tile sweep at N = 4096.
  for d in 64 128; do
    for n in 1024 4096 16384; do
      b=$((16384 / n)); h=$((2048 / d))
      for c in "" "--causal"; do
        python3 "$D/sdpa_peers.py" --shape $b,$h,$n,$d --dtype bf16 $c --providers sdpa-flash,sdpa-cudnn,triton-fa2 2>&1 | tee -a "$OUT/peers_mma.jsonl"
      done
      for mask in none causal; do
        echo -n "flashrtc bf16 d=$d N=$n mask=$mask: " | tee -a "$OUT/flashrtc_mma.log"
        "$FR" run --batch $b --heads $h --seqlen $n --head-dim $d --dtype bf16 --mask $mask --layout bhnd --iters 30 2>&1 | grep -E "TFLOP|error" | tr '\n' ' ' | tee -a "$OUT/flashrtc_mma.log"
        echo | tee -a "$OUT/flashrtc_mma.log"
      done
    done
  done
  for d in 64 128 256; do
    h=$((2048 / d))
    for cfg in ${MMA_SWEEP:-"128 64 8 2" "128 64 8 1" "128 64 4 2" "64 64 4 2" "128 128 8 2" "128 32 8 2" "64 32 4 2" "256 64 8 2" "128 128 8 1" "64 128 4 2"}; do
      set -- $cfg
      echo -n "bf16 d=$d block_m=$1 block_n=$2 warps=$3 stages=$4: "
      "$FR" run --batch 4 --heads $h --seqlen 4096 --head-dim $d --dtype bf16 --layout bhnd --iters 20 \
        --block-m $1 --block-n $2 --warps $3 --stages $4 2>&1 | grep -E "TFLOP|error|regist" | tr '\n' ' '
      echo
    done 2>&1 | tee -a "$OUT/sweep_mma.log"
  done
fi

if [[ " $steps " == *" sass "* ]]; then
  # SASS of every cached tensor-core kernel: HMMA in the loop, spills (STL/LDL) and the instruction mix.
  mkdir -p "$OUT/sass"
  for m in "$FLASHRTC_CACHE_DIR"/v1/*/*/meta.json; do
    dir=$(dirname "$m")
    grep -q attention_forward_mma "$m" || continue
    name=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['kernel']; print('%s_d%s_%s_%sx%s_w%s_s%s' % (d['dtype'], d['head_dim'], d['mask'], d['block_m'], d['block_n'], d['warps'], d['stages']))" "$m")
    cuobjdump -sass "$dir/kernel.cubin" > "$OUT/sass/$name.sass" 2>&1
    echo "$name: HMMA $(grep -c HMMA "$OUT/sass/$name.sass") LDSM $(grep -c LDSM "$OUT/sass/$name.sass") STL $(grep -c STL "$OUT/sass/$name.sass") LDL $(grep -c LDL "$OUT/sass/$name.sass") lines $(wc -l < "$OUT/sass/$name.sass")"
  done 2>&1 | tee "$OUT/sass_summary.txt"
fi

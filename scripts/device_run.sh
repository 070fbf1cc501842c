#!/usr/bin/env bash
# Runs on the GPU machine (device tool) from the repo root, after scripts/stage_device_build.sh here:
#   gpu test suites, `flashrtc run --check`, and flashrtc's timings beside the peers' (same run, same GPU).
# Usage: scripts/device_run.sh [tests] [check] [bench] [sweep]   (default: all four). Logs go to $OUT.
# Further steps, by name only: binding (the Python binding's gpu tests), grid (`flashrtc bench` over the
# standard grid), bwd (`flashrtc bench --op bwd`, default and deterministic mode), compare (bench/compare.py; COMPARE_ARGS, e.g. "--dtype bf16", restricts it), sass (SASS
# summary of every cached tensor-core kernel), tune (the tuner's gpu test, then issue 3's acceptance run:
# a quick tune of bf16 d=128 N=4096, `flashrtc config` and `flashrtc run` in new processes), host (host
# time per call: flashrtc_host_bench beside an empty kernel and with the decode calls, bench/host_overhead.py
# beside SDPA and with --decode beside the prefill call), decode (`flashrtc bench --op decode` over a few points,
# then bench/compare.py --op decode over its grid), sanitize
# (compute-sanitizer memcheck and racecheck over the gpu suite's sanitizer set and the graph test), compile
# (cold NVRTC compile time of the sm_90a defaults, one compile at a time: bench/compile_time.py), ab (kernel
# sources against each other through FLASHRTC_KERNEL_DIR: AB_VARIANTS, AB_ARGS, AB_PASSES; bench/ab_table.py).
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

if [[ " $steps " == *" binding "* ]]; then
  python3 "$D/python/test_binding_gpu.py" -v 2>&1 | tee "$OUT/python_binding_gpu.log"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/python_binding_gpu.log"
  python3 "$D/python/test_transformers_gpu.py" -v 2>&1 | tee "$OUT/python_transformers_gpu.log"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/python_transformers_gpu.log"
  for t in autograd training kvcache varlen; do  # the torch.library operators: backward against SDPA, a small training run, the KV cache, varlen
    python3 "$D/python/test_${t}_gpu.py" -v 2>&1 | tee "$OUT/python_${t}_gpu.log"
    echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/python_${t}_gpu.log"
  done
fi

if [[ " $steps " == *" grid "* ]]; then
  "$FR" bench 2>&1 | tee "$OUT/bench_grid.txt"
fi

if [[ " $steps " == *" bwd "* ]]; then
  # The backward over the standard grid at d = 64 and 128, as called (deterministic=false), then with
  # --deterministic; both run the separate dQ pass today, so the two agree. BWD_ARGS (e.g. "--seqlen 4096")
  # narrows it.
  "$FR" bench --op bwd --head-dim 64,128 --seqlen 1024,4096,16384 ${BWD_ARGS:-} 2>&1 | tee "$OUT/bench_bwd.txt"
  "$FR" bench --op bwd --deterministic --head-dim 64,128 --seqlen 1024,4096,16384 ${BWD_ARGS:-} 2>&1 |
    tee "$OUT/bench_bwd_deterministic.txt"
fi

if [[ " $steps " == *" compare "* ]]; then
  # JSON lines to a file, the table (stderr) to the terminal and a log.
  python3 "$D/python/compare.py" --json ${COMPARE_ARGS:-} 2>&1 >"$OUT/compare.jsonl" | tee "$OUT/compare.txt"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/compare.txt"
fi

if [[ " $steps " == *" sass "* ]]; then
  # SASS of every cached tensor-core kernel: HMMA in the loop, spills (STL/LDL) and the instruction mix.
  # All disassemblies stay on the machine; those of the unmasked bf16 kernels come back.
  sass=/tmp/flashrtc-sass
  mkdir -p "$sass" "$OUT/sass"
  for m in "$FLASHRTC_CACHE_DIR"/v3/*/*/meta.json; do
    dir=$(dirname "$m")
    grep -q attention_forward_mma "$m" || continue
    name=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['kernel']; print('%s_d%s_%s_%sx%s_w%s_s%s' % (d['dtype'], d['head_dim'], d['mask'], d['block_m'], d['block_n'], d['warps'], d['stages']))" "$m")
    f="$sass/$name.sass"
    cuobjdump -sass "$dir/kernel.cubin" > "$f" 2>&1
    [[ $name == bf16_*_none_* ]] && cp "$f" "$OUT/sass/"
    echo "$name: HMMA $(grep -c HMMA "$f") LDSM $(grep -c LDSM "$f") STL $(grep -c STL "$f") LDL $(grep -c LDL "$f") lines $(wc -l < "$f")"
  done 2>&1 | tee "$OUT/sass_summary.txt"
fi

if [[ " $steps " == *" tune "* ]]; then
  bash "$D/tune_then_config.sh" "$FR" > "$OUT/gpu_tune_then_config.log" 2>&1
  echo "gpu_tune_then_config: exit $?" | tee -a "$OUT/gpu_tune_then_config.log"
  (
    export FLASHRTC_CACHE_DIR=$(mktemp -d) FLASHRTC_TUNE_DB=$(mktemp -d)/tuning_db.json
    shape=(--dtype bf16 --head-dim 128 --seqlen 4096)
    plot="$OUT/tune_d128.png"
    command -v gnuplot >/dev/null || plot="$OUT/tune_d128.gp"  # the script that draws it, without gnuplot
    start=$SECONDS
    "$FR" tune "${shape[@]}" --space quick --output "$OUT/tune_d128.json" --plot "$plot"
    echo "tune wall time: $((SECONDS - start)) s (cold cache: compiles included)"
    "$FR" config "${shape[@]}"
    "$FR" run --batch 2 --heads 16 --seqlen 4096 --head-dim 128 --dtype bf16 --iters 50
  ) 2>&1 | tee "$OUT/tune_d128.log"
fi

if [[ " $steps " == *" host "* ]]; then
  "$D/flashrtc_host_bench" 2>&1 | tee "$OUT/host_overhead_cpp.log"
  python3 "$D/python/host_overhead.py" 2>&1 | tee "$OUT/host_overhead_python.log"
  python3 "$D/python/host_overhead.py" --decode 2>&1 | tee "$OUT/host_overhead_decode_python.log"
fi

if [[ " $steps " == *" decode "* ]]; then
  # attention_with_kvcache from C++ over a few of compare.py --op decode's points, contiguous and paged
  "$FR" bench --op decode --dtype bf16 --head-dim 128 --heads 32 --heads-kv 8 --batch 1,8,32,128 \
    --seqlen-kv 2048,8192,32768 --page-size 0,16,64 --json 2>&1 | tee "$OUT/bench_decode.jsonl"
  python3 "$D/python/compare.py" --op decode --json 2>&1 >"$OUT/compare_decode.jsonl" | tee "$OUT/compare_decode.txt"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/compare_decode.txt"
fi

if [[ " $steps " == *" compile "* ]]; then
  python3 bench/compile_time.py --cli "$FR" --reps 5 2>&1 | tee "$OUT/compile_time.md"
fi

if [[ " $steps " == *" ab "* ]]; then
  # Kernel sources A/B: AB_VARIANTS="old=.devbuild/kernels_old new=embedded" (NAME=DIR under the repository root,
  # or NAME=embedded for the library's own sources), each with a cache of its own, in AB_PASSES (2)
  # interleaved passes of `flashrtc bench --json $AB_ARGS`; bench/ab_table.py prints the table.
  runs=()
  for pass in $(seq 1 "${AB_PASSES:-2}"); do
    for variant in ${AB_VARIANTS:?AB_VARIANTS=\"NAME=DIR ...\"}; do
      name=${variant%%=*} dir=${variant#*=} log="$OUT/ab_${name}_$pass.jsonl"
      (
        if [[ $dir == embedded ]]; then unset FLASHRTC_KERNEL_DIR; else export FLASHRTC_KERNEL_DIR=$PWD/$dir; fi
        FLASHRTC_CACHE_DIR=/tmp/flashrtc-ab-$name "$FR" bench --json ${AB_ARGS:-} >"$log" 2>"$log.err"
      )
      echo "ab $name pass $pass: exit $?"
      runs+=("$name=$log")
    done
  done
  python3 bench/ab_table.py "${runs[@]}" | tee "$OUT/ab_table.txt"
fi

if [[ " $steps " == *" sanitize "* ]]; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$D/gpu_test_forward_gpu" -tc="compute-sanitizer set*" \
      > "$OUT/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool forward set: exit $?" | tee -a "$OUT/sanitizer_$tool.log"
    tail -n 3 "$OUT/sanitizer_$tool.log"
  done
  compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu_test_call_path_gpu" > "$OUT/sanitizer_call_path.log" 2>&1
  echo "compute-sanitizer memcheck call path: exit $?" | tee -a "$OUT/sanitizer_call_path.log"
fi

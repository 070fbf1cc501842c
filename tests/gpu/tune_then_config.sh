#!/usr/bin/env bash
# gpu: a quick tune on a small shape writes a tuning database entry that later processes use: `flashrtc
# config` reports it as the tuned config, and `flashrtc run --check` runs it and passes.
# Usage: tune_then_config.sh path/to/flashrtc. Exit 77 (ctest: skipped) without a usable GPU.
set -euo pipefail
flashrtc="$1"
if ! "$flashrtc" info --has-gpu >/dev/null 2>&1; then
  echo "*** GPU TESTS SKIPPED: $("$flashrtc" info --has-gpu 2>&1 || true) ***"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
unset FLASHRTC_CONFIG FLASHRTC_ARCH FLASHRTC_REQUIRE_CACHED FLASHRTC_ALWAYS_COMPILE FLASHRTC_DISABLE_DISK_CACHE
export FLASHRTC_CACHE_DIR="$work/cache" FLASHRTC_TUNE_DB="$work/tuning_db.json"
shape=(--dtype bf16 --head-dim 64 --seqlen 512 --mask causal)
fail() { echo "FAIL: $*"; exit 1; }

# A figure when gnuplot or matplotlib is here, else the script and data that draw it: never a failure.
plot="$work/sweep.png"
"$flashrtc" tune "${shape[@]}" --batch 2 --heads 8 --space quick --iters 5 --output "$work/tune.json" \
  --plot "$plot" | tee "$work/tune.out"
[ -s "$FLASHRTC_TUNE_DB" ] || fail "no tuning database written"
[ -s "$plot" ] || { [ -s "$plot.gp" ] && [ -s "$plot.dat" ]; } || fail "no plot, script or data at $plot"
grep -q '^plot:      ' "$work/tune.out" || fail "tune --plot said nothing about the plot"
grep -q '"written_to_db": true' "$work/tune.json" || fail "--output does not record the database write"
winner="$(sed -n 's/^winner:    \([^:]*\):.*/\1/p' "$work/tune.out")"
[ -n "$winner" ] || fail "tune printed no winner"

# A second process: the winner is the config a call resolves to, from the tuning database.
"$flashrtc" config "${shape[@]}" | tee "$work/config.out"
grep -qx "config:     $winner" "$work/config.out" || fail "flashrtc config does not resolve to the winner $winner"
grep -q '^source:     tuned ' "$work/config.out" || fail "flashrtc config does not name the tuned source"

# A third: `flashrtc run` launches it and checks it against the reference.
"$flashrtc" run "${shape[@]}" --batch 2 --heads 8 --check | tee "$work/run.out"
grep -q "^config:   $winner (tuned: " "$work/run.out" || fail "flashrtc run did not use the tuned config"
grep -q '^check: PASS' "$work/run.out" || fail "flashrtc run --check failed"
"$flashrtc" run "${shape[@]}" --batch 2 --heads 8 --check --json >"$work/run.json"
grep -q '"check_passed": true' "$work/run.json" || fail "run --json does not record the passed check"
grep -q '"source": "tuned"' "$work/run.json" || fail "run --json does not name the tuned source"

# bench --plot with no plotter on PATH: JSON lines on stdout, the plot line on stderr, the script and data.
mkdir "$work/no-plotter"
env PATH="$work/no-plotter" "$flashrtc" bench --shape 1,8,512,64 --dtype bf16 --mask causal --iters 5 --json \
  --plot "$work/bench.png" >"$work/bench.jsonl" 2>"$work/bench.err"
grep -q '"tflops":' "$work/bench.jsonl" || fail "bench --json measured nothing"
grep -q 'not drawn' "$work/bench.err" || fail "bench --plot without a plotter did not say how to draw"
[ -s "$work/bench.png.gp" ] && [ -s "$work/bench.png.dat" ] || fail "bench --plot left no script and data"

# FLASHRTC_CONFIG wins over the database (here it names the same tile, so it is valid for any family).
FLASHRTC_CONFIG="$winner" "$flashrtc" config "${shape[@]}" | tee "$work/config_env.out"
grep -q '^source:     environment ' "$work/config_env.out" || fail "FLASHRTC_CONFIG does not win over the tuned entry"
echo "PASS: tune -> database -> config and run in new processes ($winner)"

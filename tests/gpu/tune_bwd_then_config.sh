#!/usr/bin/env bash
# gpu: `flashrtc tune --op bwd --space quick` on a small shape writes tuning database entries for the backward's
# main kernel (on sm_90a the fused one) and (--deterministic --kernel dq) the deterministic mode's dQ pass that
# later processes use: `flashrtc config --op bwd [--deterministic]` reports them as the tuned tiles, `flashrtc
# bench --op bwd` launches the main kernel's, and the gpu suite test_backward_tuned_gpu checks both entries'
# gradients against the reference, each in a process of its own.
# Usage: tune_bwd_then_config.sh path/to/flashrtc path/to/gpu_test_backward_tuned_gpu. Exit 77 (ctest:
# skipped) without a usable GPU.
set -euo pipefail
flashrtc="$1"
tuned_suite="$2"
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

"$flashrtc" tune --op bwd "${shape[@]}" --batch 2 --heads 8 --space quick --iters 5 --output "$work/tune.json" |
  tee "$work/tune.out"
[ -s "$FLASHRTC_TUNE_DB" ] || fail "no tuning database written"
grep -q '"written_to_db": true' "$work/tune.json" || fail "--output does not record the database write"
grep -q '"op": "bwd"' "$work/tune.json" || fail "--output does not name the backward"
# The main kernel's family: bwd-wgmma-fused on sm_90a, bwd-mma elsewhere.
main_family="$(grep -oE 'bwd-(wgmma-fused|mma) kernels' "$work/tune.out" | head -n 1 | cut -d' ' -f1)"
[ -n "$main_family" ] || fail "bf16 did not sweep bwd-wgmma-fused or bwd-mma"
grep -q "\"family\": \"$main_family\"" "$work/tune.json" || fail "--output does not name $main_family"
winner="$(sed -n 's/^winner:    \([^:]*\):.*/\1/p' "$work/tune.out")"
[ -n "$winner" ] || fail "tune printed no winner"
grep -q "\"$main_family\"" "$FLASHRTC_TUNE_DB" || fail "the database has no $main_family entry"

# The dQ pass, which only deterministic calls run on sm_90a, swept in such calls.
"$flashrtc" tune --op bwd --deterministic --kernel dq "${shape[@]}" --batch 2 --heads 8 --space quick --iters 5 |
  tee "$work/tune_dq.out"
# The dQ pass's family: bwd-dq-wgmma on sm_90a, bwd-dq-mma elsewhere.
dq_family="$(grep -oE 'bwd-dq-(wgmma|mma) kernels' "$work/tune_dq.out" | head -n 1 | cut -d' ' -f1)"
[ -n "$dq_family" ] || fail "--kernel dq did not sweep bwd-dq-wgmma or bwd-dq-mma"
dq_winner="$(sed -n 's/^winner:    \([^:]*\):.*/\1/p' "$work/tune_dq.out")"
[ -n "$dq_winner" ] || fail "tune --kernel dq printed no winner"

# A second process: the winners are the main kernel's and the dQ pass's tiles, from the tuning database.
"$flashrtc" config --op bwd "${shape[@]}" | tee "$work/config.out"
grep -qx "main:       $main_family $winner" "$work/config.out" || fail "config --op bwd does not resolve to $winner"
sed -n '/^main:/,/^[^ ]/p' "$work/config.out" | grep -q '^  source:     tuned ' ||
  fail "config --op bwd does not name the tuned source"
"$flashrtc" config --op bwd --deterministic "${shape[@]}" | tee "$work/config_deterministic.out"
grep -qx "dQ pass:    $dq_family $dq_winner" "$work/config_deterministic.out" ||
  fail "config --op bwd --deterministic: dQ pass not $dq_winner"
sed -n '/^dQ pass:/,/^[^ ]/p' "$work/config_deterministic.out" | grep -q '^  source:     tuned ' ||
  fail "config --op bwd --deterministic does not name the dQ pass's tuned source"
"$flashrtc" config --op bwd "${shape[@]}" --json >"$work/config.json"
python3 - "$work/config.json" "$winner" "$main_family" <<'PY' || fail "config --op bwd --json does not report the tuned main kernel"
import json, sys
doc = json.load(open(sys.argv[1]))
main = [k for k in doc["kernels"] if k["role"] == "main"][0]
tile = ",".join(f"{f}={main['config'][f]}" for f in ("block_m", "block_n", "warps", "stages"))
assert main["source"] == "tuned" and main["family"] == sys.argv[3] and tile == sys.argv[2], (main, sys.argv[2])
PY
# The forward of the same call has a key of its own: the backward's tune leaves it alone.
"$flashrtc" config "${shape[@]}" | tee "$work/config_fwd.out"
grep -q '^source:     default ' "$work/config_fwd.out" || fail "the forward picked up the backward's entry"

# A third: bench --op bwd launches the tuned tile (its JSON row names the main kernel's tile).
"$flashrtc" bench --op bwd --shape 2,8,512,64 --dtype bf16 --mask causal --iters 5 --json >"$work/bench.jsonl"
python3 - "$work/bench.jsonl" "$winner" <<'PY' || fail "bench --op bwd did not run the tuned tile"
import json, sys
row = json.loads(open(sys.argv[1]).readline())
tile = ",".join(f"{f}={row['tile'][f]}" for f in ("block_m", "block_n", "warps", "stages"))
assert row["mode"] == "bwd" and row["tflops"] > 0 and tile == sys.argv[2], (row, sys.argv[2])
PY

# A fourth: the tuned entry's gradients against the reference, as attention_backward resolves it.
"$tuned_suite" --no-skip --test-case='every backward entry*' | tee "$work/suite.out"
grep -q 'checked 2 tuned backward entries' "$work/suite.out" || fail "the gpu suite did not check both entries"
echo "PASS: tune --op bwd -> database -> config, bench and the gradient check in new processes" \
  "(main $winner, dQ pass $dq_winner)"

#!/usr/bin/env python3
"""Cold NVRTC compile time of single specializations, split into ptxas and the rest (issue 9's target).

Each repetition runs `flashrtc compile --json` in a fresh, empty cache directory, so every compile is cold
(no disk entry, a new process). Per specialization it reports the median and minimum of:
  compile_ms  the entry's compile ms (meta.json: nvrtcCreateProgram to the cubin, wall clock);
  ptxas_ms    ptxas's own "Compile time = X ms" line in the entry's compile.log (-Xptxas -v);
  rest_ms     compile_ms - ptxas_ms: NVRTC's front end, the NVVM optimizer and code generation;
  cpu_ms      user + system CPU time of the whole `flashrtc compile` process (loading, the NVRTC build
              identity compile, writing the entry), which a loaded machine inflates far less than wall time;
  wall_ms     the process's wall time.
The load average is printed above the table: compile_ms is wall clock, so compare figures taken at a similar
load, or the CPU columns.

    python3 bench/compile_time.py                          # wgmma bf16 d=64,128,256 and mma d=128, sm_90a
    python3 bench/compile_time.py --head-dim 128 --reps 5 --mask none,causal
    python3 bench/compile_time.py --cli build/host/flashrtc/flashrtc --json

The `flashrtc` command is --cli, else $FLASHRTC_CLI, else build/host/flashrtc/flashrtc in this checkout.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PTXAS_TIME = re.compile(r"Compile time = ([0-9.]+) ms")
# A tile that the wgmma family cannot build (4 warps) makes `compile` fall back to mma; this one is mma's
# sm_90a default at d = 128 (runtime/src/families/forward_mma_family.cpp), given as tile options.
MMA_TILE = ["--block-m", "128", "--block-n", "32", "--warps", "4", "--stages", "2"]


def ptxas_ms(log):
    """ptxas's reported compile time in a compile log, or None when the log has none."""
    times = [float(t) for t in PTXAS_TIME.findall(log)]
    return sum(times) if times else None


def summarize(samples):
    """{field: (median, min)} over a list of per-repetition dicts (fields missing in some are skipped)."""
    fields = [f for f in ("compile_ms", "ptxas_ms", "rest_ms", "cpu_ms", "wall_ms") if all(s.get(f) is not None for s in samples)]
    return {f: (statistics.median(s[f] for s in samples), min(s[f] for s in samples)) for f in fields}


def cases(args):
    """(label, compile options) per specialization to time."""
    out = []
    # A key length picks the call's kernel: on the Hopper family the grid (persistent for short causal calls).
    lengths = ["--seqlen", str(args.seqlen)] if args.seqlen else []
    at = f" N={args.seqlen}" if args.seqlen else ""
    for mask in args.masks:
        for d in args.head_dims:
            out.append((f"{args.dtype} d={d} {mask}{at} default", ["--head-dim", str(d), "--mask", mask, *lengths]))
        if args.mma_head_dim:
            out.append((f"{args.dtype} d={args.mma_head_dim} {mask} mma 128x32 w4 s2",
                        ["--head-dim", str(args.mma_head_dim), "--mask", mask, *MMA_TILE]))
    return out


def compile_once(cli, arch, dtype, options):
    """One cold compile in a fresh cache directory: the sample dict, with the family and tile compiled."""
    with tempfile.TemporaryDirectory(prefix="flashrtc_compile_time_") as cache:
        env = dict(os.environ, FLASHRTC_CACHE_DIR=cache)
        for name in ("FLASHRTC_ALWAYS_COMPILE", "FLASHRTC_DISABLE_DISK_CACHE", "FLASHRTC_REQUIRE_CACHED"):
            env.pop(name, None)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([str(cli), "compile", "--arch", arch, "--dtype", dtype, *options, "--json"],
                              capture_output=True, text=True, env=env, timeout=600)
        wall_ms = (time.perf_counter() - start) * 1e3
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"flashrtc compile {' '.join(options)} failed ({done.returncode}): {done.stdout}{done.stderr}")
        result = json.loads(done.stdout)
        kernel = result["kernel"]
        if kernel["from"] != "compiled":
            raise RuntimeError(f"expected a cold compile, got one from {kernel['from']}")
        log = (Path(kernel["entry_dir"]) / "compile.log").read_text()
        sample = {
            "compile_ms": kernel["compile_ms"],
            "ptxas_ms": ptxas_ms(log),
            "cpu_ms": (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3,
            "wall_ms": wall_ms,
            "family": result["specialization"].get("family", ""),
            "tile": "{block_m}x{block_n} w{warps} s{stages}".format(**result["specialization"]),
            "registers": kernel["registers"],
        }
        sample["rest_ms"] = None if sample["ptxas_ms"] is None else sample["compile_ms"] - sample["ptxas_ms"]
        return sample


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cli", help="the flashrtc command (default: $FLASHRTC_CLI, else build/host/flashrtc/flashrtc)")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--dtype", default="bf16", choices=["fp16", "bf16", "fp32"])
    p.add_argument("--head-dim", dest="head_dims", default="64,128,256",
                   type=lambda s: [int(x) for x in s.split(",") if x])
    p.add_argument("--mask", dest="masks", default="none", type=lambda s: [x for x in s.split(",") if x])
    p.add_argument("--seqlen", type=int, default=0,
                   help="the calls' query and key length (default: none, the kernels of long calls)")
    p.add_argument("--mma-head-dim", type=int, default=128, help="add an mma row at this head dim (0: none)")
    p.add_argument("--reps", type=int, default=3, help="cold compiles per specialization (median and min)")
    p.add_argument("--json", action="store_true", help="one JSON line per specialization instead of a table")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be at least 1")
    cli = args.cli or os.environ.get("FLASHRTC_CLI") or REPO / "build" / "host" / "flashrtc" / "flashrtc"
    args.cli = Path(cli)
    if not args.cli.exists():
        p.error(f"no flashrtc command at {args.cli} (build it, or give --cli)")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rows = []
    for label, options in cases(args):
        samples = [compile_once(args.cli, args.arch, args.dtype, options) for _ in range(args.reps)]
        first = samples[0]
        rows.append(dict(case=label, family=first["family"], tile=first["tile"], registers=first["registers"],
                         reps=args.reps, **{f: list(v) for f, v in summarize(samples).items()}))
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{args.arch}, {args.reps} cold compiles each; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs; median (min) ms")
    fields = ("compile_ms", "ptxas_ms", "rest_ms", "cpu_ms", "wall_ms")
    print("| specialization | family | tile | regs | " + " | ".join(fields) + " |")
    print("| --- | --- | --- | --- |" + " ---: |" * len(fields))
    for row in rows:
        cells = [f"{row[f][0]:.0f} ({row[f][1]:.0f})" if f in row else "-" for f in fields]
        print(f"| {row['case']} | {row['family']} | {row['tile']} | {row['registers']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

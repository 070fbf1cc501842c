#!/usr/bin/env python3
"""Throughput of one shape held for seconds, at the GPU's power cap, beside compare.py's short bursts.

Each variant runs back to back for --seconds, timed by CUDA events in 0.25 s windows. Variants are interleaved
over --rounds, and the first second of each run is dropped: the board reaches its power cap within it. The
report is the median TFLOP/s of the remaining windows (4 B H Nq Nk d FLOPs, halved when causal). With
nvidia-smi on PATH, the SM clock and board power it samples every 100 ms are averaged over the same windows.
docs/measurements/forward-hopper/power_cap.md explains why a long call's burst figure and its sustained one differ.

    python3 bench/sustained.py --shape 2,16,8192,128 cudnn default 192,80,16,3
    python3 bench/sustained.py --shape 32,16,512,128 --causal --dtype fp16 cudnn default

VARIANT: cudnn or flash (sdpa_peers.py's sdpa-cudnn and sdpa-flash: SDPA with that backend alone), default
(flashrtc's own tile), or BM,BN,WARPS,STAGES (a flashrtc tile). flashrtc and sdpa_peers.py are found as
compare.py finds them.
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import threading
import time

from compare import import_flashrtc, load_peers


def parse_variant(name):
    """("sdpa", "cudnn" | "flash"), ("flashrtc", None) for its own tile, ("flashrtc", (bm, bn, warps, stages));
    None for anything else."""
    if name in ("cudnn", "flash"):
        return ("sdpa", name)
    if name == "default":
        return ("flashrtc", None)
    try:
        tile = tuple(int(x) for x in name.split(","))
    except ValueError:
        return None
    return ("flashrtc", tile) if len(tile) == 4 and min(tile) > 0 else None


def make_call(variant, flashrtc, peers, q, k, v, causal):
    kind, arg = variant
    if kind == "sdpa":
        peer = peers.PEERS["sdpa-" + arg]
        return lambda: peer(q, k, v, causal)
    return lambda: flashrtc.attention(q, k, v, causal=causal, config=arg)


class Sampler:
    """nvidia-smi's SM clock (MHz) and board power (W) every 100 ms, with host timestamps."""

    def __init__(self):
        self.proc = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, text=True)
            self.samples = []
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                clock, power = (float(x) for x in line.split(","))
                self.samples.append((time.time(), clock, power))
            except ValueError:
                pass

    def mean(self, spans):
        if not self.proc:
            return None
        inside = [s for s in self.samples if any(a <= s[0] <= b for a, b in spans)]
        if not inside:
            return None
        return statistics.mean(s[1] for s in inside), statistics.mean(s[2] for s in inside)

    def stop(self):
        if self.proc:
            self.proc.terminate()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+", metavar="VARIANT")
    ap.add_argument("--shape", required=True, help="B,H,N,d (q, k and v [B, H, N, d])")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--seconds", type=float, default=3.0, help="per variant and round, the first one dropped")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    try:
        B, H, N, d = (int(x) for x in a.shape.split(","))
    except ValueError:
        ap.error("--shape: B,H,N,d")
    if min(B, H, N, d) < 1:
        ap.error("--shape: B,H,N,d, all positive")
    if a.seconds <= 1.25:
        ap.error("--seconds: more than 1.25 (the first second is dropped)")
    if a.rounds < 1:
        ap.error("--rounds: at least 1")
    variants = {name: parse_variant(name) for name in a.variants}
    bad = [name for name, v in variants.items() if v is None]
    if bad:
        ap.error(f"unknown variants {bad}: give cudnn, flash, default or BM,BN,WARPS,STAGES")
    import torch
    flashrtc = import_flashrtc()
    peers = load_peers()
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=peers.DTYPES[a.dtype]) for _ in range(3))
    flops = peers.attention_flops(B, H, N, d, a.causal)
    calls = {name: make_call(variant, flashrtc, peers, q, k, v, a.causal) for name, variant in variants.items()}
    windows = {name: [] for name in a.variants}
    spans = {name: [] for name in a.variants}
    sampler = Sampler()
    try:
        for _ in range(a.rounds):
            for name, fn in calls.items():
                fn()
                torch.cuda.synchronize()
                start = time.time()
                while time.time() - start < a.seconds:
                    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    t0 = time.time()
                    begin.record()
                    n = 0
                    while time.time() - t0 < 0.25:
                        fn()
                        n += 1
                        if n % 8 == 0:
                            torch.cuda.synchronize()  # keep the host within a few calls of the GPU
                    end.record()
                    end.synchronize()
                    if t0 - start >= 1.0:
                        windows[name].append(flops / (begin.elapsed_time(end) / n) / 1e9)
                        spans[name].append((t0, time.time()))
    finally:
        sampler.stop()
    print(f"{a.dtype} B={B} H={H} N={N} d={d} causal={a.causal}: {a.rounds} x {a.seconds:g} s per variant")
    for name in a.variants:
        w = windows[name]
        line = (f"  {name:16} {statistics.median(w):7.1f} TFLOP/s sustained (windows {min(w):.1f}-{max(w):.1f}, "
                f"{len(w)} of 0.25 s)")
        seen = sampler.mean(spans[name])
        if seen:
            line += f", SM {seen[0]:.0f} MHz, {seen[1]:.0f} W"
        print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Kernel-source A/B table from `flashrtc bench --json` runs (scripts/device_run.sh ab).

Each argument is NAME=FILE.jsonl, one bench run of one variant; a name given several times (interleaved passes)
is averaged. Per point (dtype, mask, B, H, N, Nk, d) the table gives each variant's mean TFLOP/s, the spread
between its passes, and the change against the first variant named.

    python3 bench/ab_table.py old=ab_old_1.jsonl new=ab_new_1.jsonl old=ab_old_2.jsonl new=ab_new_2.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def point_key(row):
    return (row["dtype"], row["mask"], row["B"], row["H"], row["N"], row["Nk"], row["d"])


def main(argv):
    if not argv or any("=" not in a for a in argv):
        sys.exit(__doc__)
    names = []
    tflops = defaultdict(lambda: defaultdict(list))  # point -> name -> [TFLOP/s per pass]
    for arg in argv:
        name, path = arg.split("=", 1)
        if name not in names:
            names.append(name)
        for row in read(path):
            if row.get("tflops") is not None:
                tflops[point_key(row)][name].append(row["tflops"])
    base = names[0]
    head = f"{'dtype':8} {'mask':7} {'B':>3} {'H':>3} {'N':>6} {'d':>4} |" + "".join(f" {n:>16}" for n in names)
    print(head + "".join(f" {n + '/' + base:>12}" for n in names[1:]))
    gains = defaultdict(list)
    for key in sorted(tflops, key=lambda k: (k[0], k[6], k[1], k[4])):
        dtype, mask, b, h, n, nk, d = key
        cells, means = [], {}
        for name in names:
            runs = tflops[key].get(name, [])
            if runs:
                means[name] = statistics.mean(runs)
                spread = (max(runs) - min(runs)) / means[name] * 100 if len(runs) > 1 else 0.0
                cells.append(f" {means[name]:8.1f} ({spread:3.1f}%)")
            else:
                cells.append(f" {'-':>16}")
        ratios = []
        for name in names[1:]:
            if name in means and base in means:
                change = means[name] / means[base] - 1
                gains[name].append(1 + change)
                ratios.append(f" {change * 100:+11.1f}%")
            else:
                ratios.append(f" {'-':>12}")
        length = str(n) if n == nk else f"{n}/{nk}"
        print(f"{dtype:8} {mask:7} {b:>3} {h:>3} {length:>6} {d:>4} |" + "".join(cells) + "".join(ratios))
    for name in names[1:]:
        if gains[name]:
            geo = statistics.geometric_mean(gains[name])
            print(f"{name} / {base}: geometric mean {(geo - 1) * 100:+.1f}% over {len(gains[name])} points")


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env python3
"""flashrtc against its peers, in one process, on the same tensors, by the protocol of docs/PERFORMANCE.md.

For each shape: fresh random normal q, k, v ([B, H, N, d], the peers' layout); flashrtc's output checked
against a more precise reference (float32 for 16-bit inputs; its max abs error must be at most twice that
of PyTorch's SDPA in the same dtype, plus eps x max|o|; a mismatch is reported loudly, the shape is not
timed for flashrtc and the run exits 1); then flashrtc (through the Python binding) and each peer of ../shared/bench/sdpa_peers.py timed
by that script's own timer (CUDA-event median of triton.testing.do_bench, L2 evicted before each call),
each warmed first so compile and autotune time stay out. TFLOP/s = 4 B H N^2 d (halved when causal) / time.

--op bwd: the backward instead, every provider through autograd on the same leaves (flashrtc's operator,
SDPA's backends; triton-fa2 has none): "bwd" rows time o.backward(dout) from a saved forward (2.5x the
forward's FLOPs: five products against two), "fwd+bwd" rows a fresh forward and its backward (3.5x). flashrtc's
dq, dk, dv are checked first like its output (against float32 SDPA-efficient gradients; float64 math
for fp32 inputs), by the same rule with SDPA's gradients in the inputs' dtype as the peer.

--op decode: attention over a KV cache (one query token per sequence, --seqlen-q more), memory-bound, in
microseconds and GB/s of the K/V read plus q and o. flashrtc.attention_with_kvcache over a contiguous cache
[B, Nk, Hkv, d] with cache_seqlens = Nk ("flashrtc") and over a paged one with a shuffled block table
("flashrtc-paged", --page-size), checked first against a float32 reference on the first sequence by the rule
above; SDPA's cuDNN and flash backends on q [B, Hq, Nq, d] and k, v [B, Hkv, Nk, d] with enable_gqa=True
(a backend that refuses GQA gets k and v expanded to Hq heads before the timing, as its user would have to,
and its row says "kv_expanded"); and "copy", a device-to-device copy of the K/V bytes (tensor.copy_), whose
GB/s count the bytes read and written, the ceiling. Every provider is timed by the peers' timer. Grid: B 1, 8,
32, 128; Nk 2k, 8k, 32k, 128k; Hq/Hkv 32/8, 64/8, 32/32, 8/1; d 128 and 64; bf16; a point whose K/V
exceeds --max-kv-gb is skipped.

Default: the standard grid (16k tokens, model dim 2048, N 512..16k, d 64 and 128, causal and not) in
bf16 and fp16, plus d = 96 and d = 256 rows (H = 2048 // d), with each peer where it accepts the shape.

    python3 bench/compare.py                                  # the table, ratios flashrtc / peer
    python3 bench/compare.py --dtype bf16 --head-dim 128 --json > compare.jsonl
    python3 bench/compare.py --shape 2,16,4096,128 --causal yes
    python3 bench/compare.py --op bwd --dtype bf16 --head-dim 64,128    # backward beside sdpa-flash, sdpa-cudnn
    python3 bench/compare.py --from-json compare.jsonl --plot compare.png   # no GPU needed
    python3 bench/compare.py --op decode --batch 8 --seqlen-kv 32768 --heads 32/8 --json > decode.jsonl
    python3 bench/compare.py --op varlen --head-dim 64,128                # ragged batch (compare_varlen.py)
    python3 bench/compare.py --op varlen --lengths equal:4096 --heads 16/16   # beside the dense kernel

--op varlen: a packed batch of ragged lengths, forward and fwd+bwd, beside SDPA over nested jagged tensors,
SDPA over the padded batch and (at equal lengths) flashrtc's dense kernel; compare_varlen.py says how.

The peers' script is found by --peers, else next to this file (a staged .devbuild/), else in
../shared/bench/ beside the checkout. flashrtc is imported from the environment, else from next to this
file, else from the checkout's python/ folder.
"""
import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare_varlen  # noqa: E402  (beside this file, here and in a staged .devbuild/python)

REPO = HERE.parent
RATIO_PEERS = ("sdpa-flash", "sdpa-cudnn", "triton-fa2")  # the ratio columns
DEFAULT_PEERS = RATIO_PEERS + ("sdpa-efficient",)
BACKWARD_PEERS = ("sdpa-flash", "sdpa-cudnn")  # the peers with a backward
# FLOPs of each timed mode, in forwards (a backward counts 2.5 forwards: five products against two).
MODE_FORWARDS = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
MODES = {"fwd": ("fwd",), "bwd": ("bwd", "fwd+bwd")}  # --op: the modes it times
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
SHORT = {v: k for k, v in DTYPE_NAMES.items()}
GRID_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
GRID_HEAD_DIMS = (64, 128, 96, 256)  # the standard grid's two, then the extra rows
GRID_TOKENS, GRID_MODEL_DIM = 16384, 2048
# --op decode's grid (the issue's): batches, cache lengths, query/KV heads, head dims, page sizes (0: contiguous).
DECODE_BATCHES = (1, 8, 32, 128)
DECODE_SEQLENS_KV = (2048, 8192, 32768, 131072)
DECODE_HEADS = ((32, 8), (64, 8), (32, 32), (8, 1))
DECODE_HEAD_DIMS = (128, 64)
DECODE_PAGE_SIZES = (0, 16, 64)
DECODE_PEERS = ("sdpa-cudnn", "sdpa-flash")  # SDPA backends timed beside flashrtc, then the copy ceiling
DECODE_RATIO_PEER = "sdpa-cudnn"
DECODE_MAX_KV_GB = 40.0


class Mismatch(Exception):
    pass


# ---- pieces that need neither torch nor a GPU -------------------------------------------------------------

def find_peers(explicit=None):
    """Path of sdpa_peers.py: --peers, next to this file, the checkout's .devbuild/, ../shared/bench/."""
    candidates = [Path(explicit)] if explicit else [
        HERE / "sdpa_peers.py", REPO / ".devbuild" / "sdpa_peers.py", REPO.parent / "shared" / "bench" / "sdpa_peers.py"]
    for path in candidates:
        if path.is_file():
            return path
    raise SystemExit("compare.py: sdpa_peers.py not found (tried " + ", ".join(map(str, candidates)) +
                     "); pass --peers PATH")


def load_peers(explicit=None):
    """The sdpa_peers module (imports torch and triton), found by find_peers."""
    spec = importlib.util.spec_from_file_location("sdpa_peers", find_peers(explicit))
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    return peers


def import_flashrtc():
    try:
        import flashrtc
        return flashrtc
    except ImportError:
        pass
    for folder in (HERE, REPO / "python"):
        if (folder / "flashrtc" / "__init__.py").is_file():
            sys.path.insert(0, str(folder))
            import flashrtc
            return flashrtc
    raise SystemExit("compare.py: the flashrtc package is neither installed nor next to this file nor in "
                     f"{REPO / 'python'}")


def grid(dtypes, head_dims, seqlens, causals, shapes=None):
    """(dtype name, B, H, N, d, causal) in the peers' order: dtype, d, causal, N."""
    points = []
    for dtype in dtypes:
        if shapes:
            points += [(dtype, b, h, n, d, c) for (b, h, n, d) in shapes for c in causals]
            continue
        for d in head_dims:
            for causal in causals:
                for n in seqlens:
                    points.append((dtype, max(1, GRID_TOKENS // n), max(1, GRID_MODEL_DIM // d), n, d, causal))
    return points


def decode_grid(dtypes, head_dims, heads, batches, seqlens_kv, seqlen_q=1, max_kv_gb=DECODE_MAX_KV_GB):
    """(points, skipped): points (dtype name, B, Hq, Hkv, Nq, Nk, d) in the order dtype, d, heads, B, Nk; the
    skipped ones are those whose K and V would take more than max_kv_gb GB."""
    points, skipped = [], []
    for dtype in dtypes:
        for d in head_dims:
            for hq, hkv in heads:
                for b in batches:
                    for nk in seqlens_kv:
                        point = (dtype, b, hq, hkv, seqlen_q, nk, d)
                        (skipped if kv_bytes(dtype, b, hkv, nk, d) > max_kv_gb * 1e9 else points).append(point)
    return points, skipped


def element_size(dtype):
    return 4 if dtype == "float32" else 2


def kv_bytes(dtype, b, hkv, nk, d):
    """Bytes of the K and V a decode call reads: B * Hkv * Nk * d * 2 elements."""
    return 2 * b * hkv * nk * d * element_size(dtype)


def decode_bytes(dtype, b, hq, hkv, nq, nk, d):
    """Bytes a decode call moves at least: the K and V read, plus q read and o written."""
    return kv_bytes(dtype, b, hkv, nk, d) + 2 * b * nq * hq * d * element_size(dtype)


def decode_provider(row):
    """The table's column of a decode row: flashrtc-paged rows by their page size."""
    if row["provider"] == "flashrtc-paged":
        return f"paged{row['page_size']}"
    return row["provider"]


def decode_table(rows):
    """The decode table from result rows: (heading lines, one line per point, summary lines). Cells are
    microseconds/GB/s; "/cudnn" is sdpa-cudnn's time over flashrtc's (> 1: flashrtc faster), "of copy"
    flashrtc's GB/s over the copy's."""
    by_point = {}
    for row in rows:
        key = (row["dtype"], row["d"], row["H"], row["Hkv"], row["B"], row["N"], row["Nk"])
        by_point.setdefault(key, {})[decode_provider(row)] = row
    columns = ["flashrtc"] + sorted({c for r in by_point.values() for c in r if c.startswith("paged")},
                                    key=lambda c: int(c[5:])) + list(DECODE_PEERS) + ["copy"]
    head = (f"{'dtype':5} {'d':>4} {'Hq/Hkv':>6} {'B':>4} {'Nq':>3} {'Nk':>7} | " +
            " ".join(f"{c:>15}" for c in columns) + f" | {'/cudnn':>7} {'of copy':>7} | max err (sdpa)")
    heading = ["microseconds/GB/s (K/V read plus q and o; copy: bytes read and written); /cudnn = sdpa-cudnn's "
               "time over flashrtc's (> 1: flashrtc faster); of copy = flashrtc's GB/s over the copy's; "
               "* = k and v expanded to Hq heads outside the timing (the backend refuses GQA)", head]
    lines, logs, fractions = [], {}, {}
    for key in sorted(by_point, key=lambda k: (list(DTYPE_NAMES.values()).index(k[0])
                                               if k[0] in DTYPE_NAMES.values() else 9, -k[1], *k[2:])):
        r = by_point[key]
        dtype, d, hq, hkv, b, nq, nk = key

        def cell(row):
            if not row:
                return f"{'':>15}"
            if "us" in row:
                text = f"{row['us']:.1f}/{row['gbps']:.0f}" + ("*" if row.get("kv_expanded") else "")
                return f"{text:>15}"
            return f"{('MISMATCH' if row.get('mismatch') else 'error'):>15}"

        fr, peer, copy = r.get("flashrtc", {}), r.get(DECODE_RATIO_PEER, {}), r.get("copy", {})
        short = SHORT.get(dtype, dtype)
        ratio = fraction = "-"
        if fr.get("us", 0) > 0 and peer.get("us", 0) > 0:
            logs.setdefault(short, []).append(math.log(peer["us"] / fr["us"]))
            ratio = f"{peer['us'] / fr['us']:.2f}"
        if fr.get("gbps", 0) > 0 and copy.get("gbps", 0) > 0:
            fractions.setdefault(short, []).append(fr["gbps"] / copy["gbps"])
            fraction = f"{fr['gbps'] / copy['gbps']:.2f}"
        err = (f"{fr['max_abs_err']:.1e} ({fr['sdpa_max_abs_err']:.1e})" if "max_abs_err" in fr else "")
        lines.append(f"{short:5} {d:>4} {f'{hq}/{hkv}':>6} {b:>4} {nq:>3} {nk:>7} | " +
                     " ".join(cell(r.get(c)) for c in columns) + f" | {ratio:>7} {fraction:>7} | {err}")
    summary = []
    for short, values in sorted(logs.items()):
        summary.append(f"{short} decode: sdpa-cudnn / flashrtc time: geometric mean "
                       f"{math.exp(sum(values) / len(values)):.2f} over {len(values)} points, "
                       f"{sum(1 for v in values if v < 0)} below 1")
    for short, values in sorted(fractions.items()):
        summary.append(f"{short} decode: flashrtc's fraction of the copy's GB/s: median "
                       f"{sorted(values)[len(values) // 2]:.2f}, lowest {min(values):.2f} over {len(values)} points")
    return heading, lines, summary


def allowed_error(peer_err, max_ref, eps):
    """The tolerance rule (flashrtc_reference::Comparison) with SDPA as the same computation in the input precision; eps floored at 1e-5 for
    fp32, whose peers may round differently (TF32 splitting, exp2 approximations)."""
    return 2.0 * peer_err + max(eps, 1e-5) * max(max_ref, 1e-3)


def _key(row):
    return (row["dtype"], row["d"], row["causal"], row["N"], row["B"], row["H"], row.get("mode", "fwd"))


def table(rows, peers):
    """The ratio table from result rows (one per provider and shape): (heading lines, one line per shape,
    summary lines with the geometric mean of flashrtc / peer per dtype)."""
    by_shape = {}
    for row in rows:
        by_shape.setdefault(_key(row), {})[row["provider"]] = row
    ratio_peers = [p for p in RATIO_PEERS if p in peers]
    with_mode = any(row.get("mode", "fwd") != "fwd" for row in rows)  # a mode column for --op bwd only
    head = ((f"{'mode':7} " if with_mode else "") +
            f"{'dtype':5} {'d':>4} {'causal':6} {'N':>6} {'B':>3} {'H':>3} | {'flashrtc':>8} " +
            " ".join(f"{p:>14}" for p in peers) + " | " + " ".join(f"{'/' + p:>12}" for p in ratio_peers) +
            " | max err (sdpa)")
    heading = ["TFLOP/s; ratios are flashrtc / peer (> 1: flashrtc faster); max abs error against the "
               "reference (SDPA's in parentheses)", head]
    lines, summary, logs = [], [], {}
    for key in sorted(by_shape, key=lambda k: (list(DTYPE_NAMES.values()).index(k[0])
                                               if k[0] in DTYPE_NAMES.values() else 9, *k[1:])):
        r = by_shape[key]
        dtype, d, causal, n, b, h, mode = key
        dtype_mode = SHORT.get(dtype, dtype) + ("" if mode == "fwd" else " " + mode)
        fr = r.get("flashrtc", {})

        def cell(row, width):
            if not row:
                return f"{'':>{width}}"
            if "tflops" in row:
                return f"{row['tflops']:>{width}.1f}"
            return f"{('MISMATCH' if row.get('mismatch') else 'error'):>{width}}"

        ratios = []
        for p in ratio_peers:
            if fr.get("ms", 0) > 0 and r.get(p, {}).get("ms", 0) > 0:
                ratio = r[p]["ms"] / fr["ms"]  # = TFLOP/s ratio (same FLOPs), without the TFLOP/s rounding
                logs.setdefault((dtype_mode, p), []).append(math.log(ratio))
                ratios.append(f"{ratio:>12.2f}")
            else:
                ratios.append(f"{'-':>12}")
        err = (f"{fr['max_abs_err']:.1e} ({fr['sdpa_max_abs_err']:.1e})" if "max_abs_err" in fr else "")
        lines.append((f"{mode:7} " if with_mode else "") +
                     f"{SHORT.get(dtype, dtype):5} {d:>4} {'yes' if causal else 'no':6} {n:>6} {b:>3} {h:>3} | "
                     f"{cell(fr, 8)} " + " ".join(cell(r.get(p), 14) for p in peers) + " | " +
                     " ".join(ratios) + " | " + err)
    for (dtype_mode, p), values in sorted(logs.items()):
        gm = math.exp(sum(values) / len(values))
        below = sum(1 for v in values if v < 0)
        summary.append(f"{dtype_mode}: flashrtc / {p}: geometric mean {gm:.2f} over {len(values)} "
                       f"shapes, {below} below 1")
    return heading, lines, summary


def plot(rows, path):
    """TFLOP/s against N, one panel per (dtype, causal) row and head dim column, a line per provider."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if "tflops" in r]
    panels_rows = sorted({(r["dtype"], r["causal"]) for r in ok})
    head_dims = sorted({r["d"] for r in ok})
    if not ok:
        raise SystemExit("compare.py: nothing to plot (no timed rows)")
    fig, axes = plt.subplots(len(panels_rows), len(head_dims), squeeze=False, sharex=True,
                             figsize=(4 * len(head_dims), 3 * len(panels_rows)))
    providers = sorted({(r["provider"], r.get("mode", "fwd")) for r in ok}, key=lambda p: (p[0] != "flashrtc", p))
    for i, (dtype, causal) in enumerate(panels_rows):
        for j, d in enumerate(head_dims):
            ax = axes[i][j]
            for p, mode in providers:
                pts = sorted((r["N"], r["tflops"]) for r in ok
                             if (r["dtype"], r["causal"], r["d"], r["provider"], r.get("mode", "fwd"))
                             == (dtype, causal, d, p, mode))
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=p if mode == "fwd" else f"{p} {mode}",
                            linewidth=2.5 if p == "flashrtc" else 1.2)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{SHORT.get(dtype, dtype)} d={d} {'causal' if causal else 'non-causal'}", fontsize=9)
            ax.grid(True, alpha=0.3)
            if j == 0:
                ax.set_ylabel("TFLOP/s")
            if i == len(panels_rows) - 1:
                ax.set_xlabel("N")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", help="comma-separated: bf16, fp16, fp32 (default bf16,fp16; --op decode: bf16)")
    ap.add_argument("--head-dim", help="comma-separated grid head dims (H = 2048 // d; default "
                    f"{','.join(map(str, GRID_HEAD_DIMS))}; --op decode: {','.join(map(str, DECODE_HEAD_DIMS))})")
    ap.add_argument("--seqlen", default=",".join(map(str, GRID_SEQLENS)), help="grid lengths (B = 16384 // N)")
    ap.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    ap.add_argument("--shape", action="append", help="B,H,N,d instead of the grid (repeatable)")
    ap.add_argument("--op", default="fwd", choices=sorted(MODES) + ["decode", "varlen"],
                    help="fwd (default): the forward; bwd: the backward and fwd+bwd, through autograd; decode: "
                    "attention over a KV cache; varlen: a packed batch of ragged sequences, fwd and fwd+bwd")
    decode = ap.add_argument_group("--op decode")
    decode.add_argument("--batch", default=",".join(map(str, DECODE_BATCHES)), help="comma-separated batches")
    decode.add_argument("--seqlen-kv", default=",".join(map(str, DECODE_SEQLENS_KV)),
                        help="comma-separated cache lengths (every sequence holds that many tokens)")
    decode.add_argument("--heads", help="comma-separated Hq/Hkv pairs (default "
                        f"{','.join(f'{q}/{kv}' for q, kv in DECODE_HEADS)}; --op varlen: one pair, default "
                        "H = 2048 // d for queries and keys)")
    decode.add_argument("--seqlen-q", type=int, default=1, help="query tokens per sequence (default 1)")
    decode.add_argument("--page-size", default=",".join(map(str, DECODE_PAGE_SIZES)),
                        help="comma-separated: 0 times the contiguous cache, a power of two a paged one with a "
                        "shuffled block table")
    decode.add_argument("--max-kv-gb", type=float, default=DECODE_MAX_KV_GB,
                        help="skip a point whose K and V take more GB than this")
    varlen = ap.add_argument_group("--op varlen")
    varlen.add_argument("--lengths", default=compare_varlen.DEFAULT_LENGTHS,
                        help="uniform:LO:HI (drawn with --seed), equal:L, or a comma-separated list")
    varlen.add_argument("--total-tokens", type=int, default=compare_varlen.DEFAULT_TOTAL_TOKENS,
                        help="tokens of the batch (uniform: draws until this many; equal: total // L sequences)")
    varlen.add_argument("--seed", type=int, default=0, help="of the uniform draw (default 0)")
    ap.add_argument("--providers", help="peers of sdpa_peers.py to time (default: "
                    f"{','.join(DEFAULT_PEERS)}; with --op bwd {','.join(BACKWARD_PEERS)}; with --op decode "
                    f"{','.join(DECODE_PEERS)}, SDPA's backends by the peers' names)")
    ap.add_argument("--peers", help="path of sdpa_peers.py")
    ap.add_argument("--json", action="store_true", help="JSON lines on stdout (the table goes to stderr)")
    ap.add_argument("--plot", metavar="FILE", help="TFLOP/s against N per provider (needs matplotlib)")
    ap.add_argument("--from-json", metavar="FILE", help="table (and --plot) from an earlier --json run, no GPU")
    a = ap.parse_args(argv)
    decoding = a.op == "decode"
    if a.heads is None and a.op != "varlen":
        a.heads = ",".join(f"{q}/{kv}" for q, kv in DECODE_HEADS)
    if a.dtype is None:
        a.dtype = "bf16" if decoding else "bf16,fp16"
    if a.head_dim is None:
        a.head_dim = ",".join(map(str, DECODE_HEAD_DIMS if decoding else GRID_HEAD_DIMS))
    try:
        a.dtypes = [DTYPE_NAMES[x] for x in a.dtype.split(",")]
    except KeyError as e:
        ap.error(f"--dtype: unknown {e} (bf16, fp16, fp32)")
    try:
        a.batches = [int(x) for x in a.batch.split(",")]
        a.seqlens_kv = [int(x) for x in a.seqlen_kv.split(",")]
        a.page_sizes = [int(x) for x in a.page_size.split(",")]
        a.heads_pairs = [tuple(int(y) for y in x.split("/")) for x in a.heads.split(",")] if a.heads else []
        a.head_dims = [int(x) for x in a.head_dim.split(",")]
        a.seqlens = [int(x) for x in a.seqlen.split(",")]
        a.shapes = [tuple(int(x) for x in s.split(",")) for s in a.shape or []]
    except ValueError as e:
        ap.error(f"expected integers: {e}")
    if any(len(s) != 4 or min(s) < 1 for s in a.shapes):
        ap.error("--shape: give B,H,N,d, all positive")
    if any(len(p) != 2 or min(p) < 1 or p[0] % p[1] for p in a.heads_pairs):
        ap.error("--heads: give Hq/Hkv pairs, Hq a positive multiple of Hkv")
    if min(a.batches + a.seqlens_kv + a.head_dims + [a.seqlen_q]) < 1:
        ap.error("--batch, --seqlen-kv, --head-dim and --seqlen-q take positive integers")
    if any(p < 0 or (p & (p - 1)) for p in a.page_sizes):
        ap.error("--page-size: 0 (contiguous) or a power of two")
    a.causals = {"both": [False, True], "yes": [True], "no": [False]}[a.causal]
    if a.op == "varlen":
        if len(a.heads_pairs) > 1:
            ap.error("--op varlen takes one --heads pair")
        a.varlen_heads = a.heads_pairs[0] if a.heads_pairs else None
        try:
            a.varlen_lengths = compare_varlen.lengths_of(a.lengths, a.total_tokens, a.seed)
        except ValueError as e:
            ap.error(str(e))
        if a.providers is not None or a.plot:
            ap.error("--op varlen times its own providers (compare_varlen.py) and prints its table only")
    default_peers = {"fwd": DEFAULT_PEERS, "bwd": BACKWARD_PEERS, "decode": DECODE_PEERS}.get(a.op, ())
    providers = a.providers if a.providers is not None else ",".join(default_peers)
    a.peer_names = [p for p in providers.split(",") if p]
    if a.plot and decoding:
        ap.error("--plot draws TFLOP/s of the forward and backward; --op decode prints its table only")
    if a.plot and importlib.util.find_spec("matplotlib") is None:
        ap.error("--plot needs matplotlib, which is not installed here (Debian: apt install python3-matplotlib; "
                 "or pip install matplotlib). Run with --json and plot elsewhere with --from-json FILE --plot OUT")
    return a


# ---- the measurement (torch, a GPU) ------------------------------------------------------------------------

def reference(torch, F, sdpa_kernel, SDPBackend, q, k, v, causal):
    """o of the inputs, computed more precisely than they are stored: for 16-bit inputs, in float32 by the
    memory-efficient backend over every head (O(N) memory); for float32 inputs (or if that backend
    refuses), in float64 by unfused math on the first batch's first two heads (O(N^2) memory).
    Returns (reference, the slice of q it covers)."""
    everything = (slice(None), slice(None))
    if q.dtype != torch.float32:
        try:
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
                return F.scaled_dot_product_attention(*(x.float() for x in (q, k, v)), is_causal=causal), everything
        except RuntimeError:
            pass
    part = (slice(0, 1), slice(0, 2))
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(*(x[part].double() for x in (q, k, v)), is_causal=causal), part


def check(torch, F, sdpa_kernel, SDPBackend, flashrtc, q, k, v, causal):
    """flashrtc's and SDPA's max abs errors against the reference; raises Mismatch over the rule."""
    ref, part = reference(torch, F, sdpa_kernel, SDPBackend, q, k, v, causal)
    o = flashrtc.attention(q, k, v, causal=causal)[part].to(ref.dtype)
    peer = F.scaled_dot_product_attention(q, k, v, is_causal=causal)[part].to(ref.dtype)
    err = (o - ref).abs().max().item()
    peer_err = (peer - ref).abs().max().item()
    allowed = allowed_error(peer_err, ref.abs().max().item(), torch.finfo(q.dtype).eps)
    result = dict(max_abs_err=err, sdpa_max_abs_err=peer_err, allowed_err=allowed,
                  checked="all heads" if part[0] == slice(None) else "batch 0, heads 0-1")
    if not (err <= allowed):  # NaN fails too
        raise Mismatch(result)
    return result


def reference_gradients(torch, F, sdpa_kernel, SDPBackend, q, k, v, dout, causal):
    """(o, dq, dk, dv) by autograd, more precise than the inputs, as reference() chooses (float32 efficient
    over every head, else float64 math on batch 0, heads 0-1); returns them and the slice they cover."""
    def by(backend, dtype, part):
        leaves = [x[part].detach().to(dtype).requires_grad_() for x in (q, k, v)]
        with sdpa_kernel([backend]):
            o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        o.backward(dout[part].to(dtype))
        return (o.detach(),) + tuple(x.grad for x in leaves)

    everything = (slice(None), slice(None))
    if q.dtype != torch.float32:
        try:
            return by(SDPBackend.EFFICIENT_ATTENTION, torch.float32, everything), everything
        except RuntimeError:
            pass
    part = (slice(0, 1), slice(0, 2))
    return by(SDPBackend.MATH, torch.float64, part), part


def check_backward(torch, F, sdpa_kernel, SDPBackend, flashrtc, q, k, v, dout, causal):
    """check()'s rule for o, dq, dk and dv, each against its reference with SDPA's in the inputs' dtype as the
    peer; the row reports the tensor closest to its limit. Raises Mismatch over the rule."""
    ref, part = reference_gradients(torch, F, sdpa_kernel, SDPBackend, q, k, v, dout, causal)

    def by(fn):
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        o = fn(*leaves)
        o.backward(dout)
        return [t[part].to(ref[0].dtype) for t in (o.detach(),) + tuple(x.grad for x in leaves)]

    mine = by(lambda *x: flashrtc.attention(*x, causal=causal))
    peer = by(lambda *x: F.scaled_dot_product_attention(*x, is_causal=causal))
    worst = None
    for name, m, p, r in zip(("o", "dq", "dk", "dv"), mine, peer, ref):
        err, peer_err = (m - r).abs().max().item(), (p - r).abs().max().item()
        allowed = allowed_error(peer_err, r.abs().max().item(), torch.finfo(q.dtype).eps)
        result = dict(max_abs_err=err, sdpa_max_abs_err=peer_err, allowed_err=allowed, checked_tensor=name,
                      checked="all heads" if part[0] == slice(None) else "batch 0, heads 0-1")
        if not (err <= allowed):  # NaN fails too
            raise Mismatch(result)
        if worst is None or err / allowed > worst["max_abs_err"] / worst["allowed_err"]:
            worst = result
    return worst


def measure_all(a):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flashrtc = import_flashrtc()
    peers = load_peers(a.peers)
    unknown = [p for p in a.peer_names if p not in peers.PEERS]
    if unknown:
        raise SystemExit(f"compare.py: unknown providers {unknown} (sdpa_peers.py has {sorted(peers.PEERS)})")
    table_out = sys.stderr if a.json else sys.stdout
    print(f"flashrtc {flashrtc.library_version()} ({flashrtc.loaded_path()}); torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}; peers from {peers.__spec__.origin}", file=table_out, flush=True)

    rows, mismatches = [], []
    backward = a.op == "bwd"
    for (dtype_name, b, h, n, d, causal) in grid(a.dtypes, a.head_dims, a.seqlens, a.causals, a.shapes):
        dtype = getattr(torch, dtype_name)
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=backward) for _ in range(3))
        dout = torch.randn_like(q) if backward else None
        base = dict(dtype=dtype_name, B=b, H=h, N=n, d=d, causal=causal)
        flops = peers.attention_flops(b, h, n, d, causal)
        forwards = {"flashrtc": lambda: flashrtc.attention(q, k, v, causal=causal)}
        forwards.update({p: (lambda fn=peers.PEERS[p]: fn(q, k, v, causal)) for p in a.peer_names})
        shape_rows = []
        for provider, forward in forwards.items():
            provider_rows = [dict(provider=provider, mode=mode, **base) for mode in MODES[a.op]]
            try:
                if provider == "flashrtc":
                    checked = (check_backward(torch, F, sdpa_kernel, SDPBackend, flashrtc, q, k, v, dout, causal)
                               if backward else check(torch, F, sdpa_kernel, SDPBackend, flashrtc, q, k, v, causal))
                    for row in provider_rows:
                        row.update(checked)
                for row in provider_rows:
                    fn = timed(forward, row["mode"], dout, (q, k, v))
                    try:
                        fn()  # warm: compile, autotune, load
                        torch.cuda.synchronize()
                        ms = peers.time_fn(fn)
                        row.update(ms=round(ms, 4), tflops=round(MODE_FORWARDS[row["mode"]] * flops / ms / 1e9, 1))
                    except Exception as e:  # a provider that refuses a shape, a dtype or a backward is a row too
                        row.update(error=type(e).__name__ + ": " + (str(e).splitlines() or [""])[0][:160])
            except Mismatch as e:
                for row in provider_rows:
                    row.update(e.args[0], mismatch=True, error="output mismatch against the reference")
                mismatches.append(provider_rows[0])
                what = f"{e.args[0]['checked_tensor']} " if "checked_tensor" in e.args[0] else ""
                print(f"MISMATCH: flashrtc {a.op} {SHORT[dtype_name]} B={b} H={h} N={n} d={d} causal={causal}: "
                      f"{what}max abs error {e.args[0]['max_abs_err']:.3g} > allowed {e.args[0]['allowed_err']:.3g} "
                      f"(SDPA's error {e.args[0]['sdpa_max_abs_err']:.3g})", file=sys.stderr, flush=True)
            except Exception as e:  # e.g. a library without the backward: its rows say so
                for row in provider_rows:
                    row.update(error=type(e).__name__ + ": " + (str(e).splitlines() or [""])[0][:160])
            for row in provider_rows:
                shape_rows.append(row)
                if a.json:
                    print(json.dumps(row), flush=True)
        heading, lines, _ = table(shape_rows, a.peer_names)
        print("\n".join(lines if rows else heading + lines), file=table_out, flush=True)
        rows += shape_rows
    return rows, mismatches


SDPA_BACKENDS = {"sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION",
                 "sdpa-efficient": "EFFICIENT_ATTENTION", "sdpa-math": "MATH"}


def decode_reference(torch, q, k, v):
    """o of the first sequence in float32: q [B, Nq, Hq, d], k and v [B, Nk, Hkv, d]; each KV head's query
    heads as one batched product, so no head is expanded. Returns [1, Nq, Hq, d]."""
    _, nq, hq, d = q.shape
    hkv = k.shape[2]
    group = hq // hkv
    q0 = q[0].float().reshape(nq, hkv, group, d).permute(1, 2, 0, 3).reshape(hkv, group * nq, d)
    k0, v0 = (x[0].float().transpose(0, 1) for x in (k, v))  # [Hkv, Nk, d]
    p = torch.softmax(q0 @ k0.transpose(1, 2) * d ** -0.5, dim=-1)
    return (p @ v0).reshape(hkv, group, nq, d).permute(2, 0, 1, 3).reshape(1, nq, hq, d)


def paged_cache(torch, k, v, page_size, generator):
    """k and v [B, Nk, Hkv, d] as pages [B * Nk / page_size, page_size, Hkv, d] in a shuffled order, and the
    block table [B, Nk / page_size] int32 that reads them back."""
    b, nk, hkv, d = k.shape
    per_seq = nk // page_size
    order = torch.randperm(b * per_seq, generator=generator).to(k.device)
    table = order.reshape(b, per_seq).to(torch.int32)
    pages = []
    for x in (k, v):
        paged = torch.empty(b * per_seq, page_size, hkv, d, device=x.device, dtype=x.dtype)
        paged[order] = x.reshape(b * per_seq, page_size, hkv, d)
        pages.append(paged)
    return pages[0], pages[1], table


def measure_decode(a):
    """--op decode: the rows of every point of decode_grid, printed as they finish."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flashrtc = import_flashrtc()
    peers = load_peers(a.peers)
    unknown = [p for p in a.peer_names if p not in SDPA_BACKENDS]
    if unknown:
        raise SystemExit(f"compare.py: --op decode times SDPA's backends ({', '.join(SDPA_BACKENDS)}), not {unknown}")
    table_out = sys.stderr if a.json else sys.stdout
    print(f"flashrtc {flashrtc.library_version()} ({flashrtc.loaded_path()}); torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}; timer from {peers.__spec__.origin}", file=table_out, flush=True)
    points, skipped = decode_grid(a.dtypes, a.head_dims, a.heads_pairs, a.batches, a.seqlens_kv, a.seqlen_q,
                                  a.max_kv_gb)
    for (dtype_name, b, hq, hkv, nq, nk, d) in skipped:
        print(f"skipped: {SHORT[dtype_name]} d={d} Hq/Hkv={hq}/{hkv} B={b} Nk={nk}: K and V take "
              f"{kv_bytes(dtype_name, b, hkv, nk, d) / 1e9:.0f} GB > --max-kv-gb {a.max_kv_gb:g}",
              file=table_out, flush=True)
    rows, mismatches = [], []
    first = True
    for (dtype_name, b, hq, hkv, nq, nk, d) in points:
        dtype = getattr(torch, dtype_name)
        torch.manual_seed(0)
        generator = torch.Generator().manual_seed(0)
        q = torch.randn(b, nq, hq, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype) for _ in range(2))
        seqlens = torch.full((b,), nk, device="cuda", dtype=torch.int32)
        moved = decode_bytes(dtype_name, b, hq, hkv, nq, nk, d)
        base = dict(mode="decode", dtype=dtype_name, B=b, H=hq, Hkv=hkv, N=nq, Nk=nk, d=d, bytes=moved)
        point_rows = []

        def timed_row(row, fn, counted=moved):
            try:
                fn()  # warm: compile, load
                torch.cuda.synchronize()
                ms = peers.time_fn(fn)
                row.update(us=round(ms * 1e3, 2), gbps=round(counted / (ms * 1e-3) / 1e9, 1))
            except Exception as e:  # a provider that refuses the shape is a row too
                row.update(error=type(e).__name__ + ": " + (str(e).splitlines() or [""])[0][:160])
            point_rows.append(row)

        # flashrtc, contiguous then paged: checked on the first sequence against float32, then timed.
        ref = decode_reference(torch, q, k, v)
        peer = None
        try:
            peer = F.scaled_dot_product_attention(q[:1].transpose(1, 2), k[:1].transpose(1, 2),
                                                  v[:1].transpose(1, 2), enable_gqa=True).transpose(1, 2)
        except RuntimeError:  # no backend takes GQA on this torch: the same computation on expanded heads
            peer = F.scaled_dot_product_attention(
                q[:1].transpose(1, 2), *(x[:1].repeat_interleave(hq // hkv, dim=2).transpose(1, 2) for x in (k, v))
            ).transpose(1, 2)
        peer_err = (peer.float() - ref).abs().max().item()
        for page_size in a.page_sizes:
            row = dict(provider="flashrtc-paged" if page_size else "flashrtc", page_size=page_size, **base)
            try:
                if page_size:
                    if nk % page_size:
                        raise ValueError(f"Nk={nk} is not a multiple of the page size {page_size}")
                    k_cache, v_cache, table = paged_cache(torch, k, v, page_size, generator)
                else:
                    k_cache, v_cache, table = k, v, None

                def call(k_cache=k_cache, v_cache=v_cache, table=table):
                    return flashrtc.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                                           block_table=table)

                err = (call()[:1].float() - ref).abs().max().item()
                allowed = allowed_error(peer_err, ref.abs().max().item(), torch.finfo(dtype).eps)
                row.update(max_abs_err=err, sdpa_max_abs_err=peer_err, allowed_err=allowed, checked="sequence 0")
                if not (err <= allowed):  # NaN fails too
                    row.update(mismatch=True, error="output mismatch against the reference")
                    mismatches.append(row)
                    print(f"MISMATCH: flashrtc decode {SHORT[dtype_name]} B={b} Hq={hq} Hkv={hkv} Nq={nq} Nk={nk} "
                          f"d={d} page_size={page_size}: max abs error {err:.3g} > allowed {allowed:.3g} "
                          f"(SDPA's error {peer_err:.3g})", file=sys.stderr, flush=True)
                    point_rows.append(row)
                else:
                    timed_row(row, call)
                del k_cache, v_cache, table
                call = None  # its defaults hold the paged copy
            except Exception as e:  # a binding without attention_with_kvcache, a refused shape
                row.update(error=type(e).__name__ + ": " + (str(e).splitlines() or [""])[0][:160])
                point_rows.append(row)
        del ref, peer

        # SDPA in its own layout, [B, H, N, d]: made contiguous before the timing, as its caller would hold it.
        qt = q.transpose(1, 2).contiguous()
        kt, vt = (x.transpose(1, 2).contiguous() for x in (k, v))
        for provider in a.peer_names:
            backend = getattr(SDPBackend, SDPA_BACKENDS[provider])
            row = dict(provider=provider, **base)

            def sdpa(kk=kt, vv=vt, gqa=hq != hkv, backend=backend):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(qt, kk, vv, enable_gqa=gqa)
            fn = sdpa
            try:
                sdpa()
            except RuntimeError:
                if hq != hkv:  # else refused outright: the timed row says why
                    try:
                        expanded = [x.repeat_interleave(hq // hkv, dim=1) for x in (kt, vt)]
                        row["kv_expanded"] = True
                        fn = (lambda kk=expanded[0], vv=expanded[1], backend=backend:
                              sdpa(kk, vv, False, backend))
                    except RuntimeError as e:  # out of memory for the expanded heads
                        fn = None
                        row.update(kv_expanded=True,
                                   error=type(e).__name__ + ": " + (str(e).splitlines() or [""])[0][:160])
                        point_rows.append(row)
            if fn is not None:
                timed_row(row, fn)
            fn = expanded = None
        del qt, kt, vt

        # The ceiling: a device-to-device copy of the K/V bytes, counted as read plus written.
        row = dict(provider="copy", **base)
        row["bytes"] = 2 * kv_bytes(dtype_name, b, hkv, nk, d)
        dst = torch.empty_like(k)
        timed_row(row, lambda: (dst.copy_(k), dst.copy_(v)), row["bytes"])
        del dst, q, k, v
        torch.cuda.empty_cache()

        for row in point_rows:
            if a.json:
                print(json.dumps(row), flush=True)
        heading, lines, _ = decode_table(point_rows)
        print("\n".join(heading + lines if first else lines), file=table_out, flush=True)
        first = False
        rows += point_rows
    return rows, mismatches


def timed(forward, mode, dout, leaves):
    """What one timing runs: the forward; the backward of one saved forward (o.backward(dout) with the graph
    kept, as sdpa_peers.py times it); or a fresh forward and its backward."""
    if mode == "fwd":
        return forward
    for x in leaves:
        x.grad = None  # every provider accumulates into fresh gradients
    if mode == "bwd":
        o = forward()
        return lambda: o.backward(dout, retain_graph=True)
    return lambda: forward().backward(dout)


def main(argv=None):
    a = parse_args(argv)
    if a.from_json:
        rows = [json.loads(line) for line in Path(a.from_json).read_text().splitlines() if line.strip()]
        decode_rows = [r for r in rows if r.get("mode") == "decode"]
        varlen_rows = [r for r in rows if "tokens" in r]
        rows = [r for r in rows if r.get("mode") != "decode" and "tokens" not in r]
        output = []
        if varlen_rows:
            heading, lines, summary = compare_varlen.varlen_table(varlen_rows, SHORT)
            output += heading + lines + summary
        if rows:
            names = [p for p in a.peer_names if any(r["provider"] == p for r in rows)]
            heading, lines, summary = table(rows, names)
            output += heading + lines + summary
        if decode_rows:
            heading, lines, summary = decode_table(decode_rows)
            output += heading + lines + summary
        print("\n".join(output))
        mismatches = [r for r in rows + decode_rows + varlen_rows if r.get("mismatch")]
        rows = rows or decode_rows
    elif a.op == "varlen":
        rows, mismatches = compare_varlen.measure_varlen(a, sys.modules[__name__])
        print("\n".join(compare_varlen.varlen_table(rows, SHORT)[2]), file=sys.stderr if a.json else sys.stdout)
    elif a.op == "decode":
        rows, mismatches = measure_decode(a)  # prints the table's lines as the points finish
        print("\n".join(decode_table(rows)[2]), file=sys.stderr if a.json else sys.stdout)
    else:
        rows, mismatches = measure_all(a)  # prints the table's lines as the shapes finish
        print("\n".join(table(rows, a.peer_names)[2]), file=sys.stderr if a.json else sys.stdout)
    if a.plot:
        plot(rows, a.plot)
        print(f"plot: {a.plot}", file=sys.stderr)
    if mismatches:
        print(f"FAILED: flashrtc's output mismatched on {len(mismatches)} shape(s), listed above",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

Default: the standard grid (16k tokens, model dim 2048, N 512..16k, d 64 and 128, causal and not) in
bf16 and fp16, plus d = 96 and d = 256 rows (H = 2048 // d), with each peer where it accepts the shape.

    python3 bench/compare.py                                  # the table, ratios flashrtc / peer
    python3 bench/compare.py --dtype bf16 --head-dim 128 --json > compare.jsonl
    python3 bench/compare.py --shape 2,16,4096,128 --causal yes
    python3 bench/compare.py --op bwd --dtype bf16 --head-dim 64,128    # backward beside sdpa-flash, sdpa-cudnn
    python3 bench/compare.py --from-json compare.jsonl --plot compare.png   # no GPU needed

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
    ap.add_argument("--dtype", default="bf16,fp16", help="comma-separated: bf16, fp16, fp32")
    ap.add_argument("--head-dim", default=",".join(map(str, GRID_HEAD_DIMS)),
                    help="comma-separated grid head dims (H = 2048 // d)")
    ap.add_argument("--seqlen", default=",".join(map(str, GRID_SEQLENS)), help="grid lengths (B = 16384 // N)")
    ap.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    ap.add_argument("--shape", action="append", help="B,H,N,d instead of the grid (repeatable)")
    ap.add_argument("--op", default="fwd", choices=sorted(MODES),
                    help="fwd (default): the forward; bwd: the backward and fwd+bwd, through autograd")
    ap.add_argument("--providers", help="peers of sdpa_peers.py to time (default: "
                    f"{','.join(DEFAULT_PEERS)}; with --op bwd {','.join(BACKWARD_PEERS)})")
    ap.add_argument("--peers", help="path of sdpa_peers.py")
    ap.add_argument("--json", action="store_true", help="JSON lines on stdout (the table goes to stderr)")
    ap.add_argument("--plot", metavar="FILE", help="TFLOP/s against N per provider (needs matplotlib)")
    ap.add_argument("--from-json", metavar="FILE", help="table (and --plot) from an earlier --json run, no GPU")
    a = ap.parse_args(argv)
    try:
        a.dtypes = [DTYPE_NAMES[x] for x in a.dtype.split(",")]
    except KeyError as e:
        ap.error(f"--dtype: unknown {e} (bf16, fp16, fp32)")
    try:
        a.head_dims = [int(x) for x in a.head_dim.split(",")]
        a.seqlens = [int(x) for x in a.seqlen.split(",")]
        a.shapes = [tuple(int(x) for x in s.split(",")) for s in a.shape or []]
    except ValueError as e:
        ap.error(f"expected integers: {e}")
    if any(len(s) != 4 or min(s) < 1 for s in a.shapes):
        ap.error("--shape: give B,H,N,d, all positive")
    a.causals = {"both": [False, True], "yes": [True], "no": [False]}[a.causal]
    providers = a.providers if a.providers is not None else ",".join(DEFAULT_PEERS if a.op == "fwd"
                                                                     else BACKWARD_PEERS)
    a.peer_names = [p for p in providers.split(",") if p]
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
        names = [p for p in a.peer_names if any(r["provider"] == p for r in rows)]
        heading, lines, summary = table(rows, names)
        print("\n".join(heading + lines + summary))
        mismatches = [r for r in rows if r.get("mismatch")]
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

#!/usr/bin/env python3
"""Host time per call of flashrtc.attention beside torch's scaled_dot_product_attention, in one process,
on the same tiny CUDA tensors (bf16 [B, H, N, d] = [1, 1, 2, 64]: the GPU side stays out of the way).

Each row: N back-to-back calls timed with time.perf_counter, no synchronize inside the loop (the stream is
synchronized between repetitions), the median over several repetitions, flashrtc and SDPA interleaved so
drift hits both alike. Both are warmed first (flashrtc's kernel compiled or loaded, its signature cached).

Rows: the plain inference call (non-causal, causal); then the torch.library operator's paths: the operator
called directly on tensors that need no grad ("operator"), the call recorded by autograd on leaves that
require grad ("autograd fwd"), the backward of such a call alone ("bwd": the forwards run untimed before
each batch) and both ("fwd + bwd"; these two when the library has the backward), and a
torch.compile(fullgraph=True) function of one call on tensors that need no grad ("compiled"; measure()
warms each function first, which compiles it).

    python3 bench/host_overhead.py                   # the table and the ratios flashrtc / SDPA
    python3 bench/host_overhead.py --json            # one JSON object per row
    python3 bench/host_overhead.py --fake            # no GPU: the binding's own Python cost per call on a
                                                     # fake torch (python/tests/fake_torch.py) with the C
                                                     # call replaced by a no-op
    python3 bench/host_overhead.py --stub-kernels    # no GPU, real torch: every row but "compiled", on CPU
                                                     # tensors that stand in for CUDA ones, the C calls a C
                                                     # function that returns at once (SDPA on CPU beside)
    python3 bench/host_overhead.py --stub-kernels --profile "autograd fwd"   # where that row's time goes
    python3 bench/host_overhead.py --decode          # attention_with_kvcache beside the prefill forward

--decode: flashrtc.attention_with_kvcache over a tiny cache (q [1, 1, 1, 64], a contiguous cache of 2 tokens,
then a paged one: one page of 16 tokens through a block table; cache_seqlens 2) beside flashrtc.attention on
SHAPE (the prefill call), interleaved as above; the ratio is decode / prefill (the goal: at most 1.10).

Exit codes: 0 measured, 1 flashrtc's output disagrees with SDPA's, 2 usage, 77 no torch or no GPU.
flashrtc is imported from the environment, else from the checkout's python/ folder.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHAPE = (1, 1, 2, 64)
EXIT_MISMATCH, EXIT_SKIP = 1, 77


def import_flashrtc():
    try:
        import flashrtc
    except ImportError:
        sys.path.insert(0, str(REPO / "python"))
        import flashrtc
    return flashrtc


class Batched:
    """A row whose every call needs untimed work first (a backward needs a forward's graph): prepare(n) gives
    n states, run(state) is the timed call."""

    def __init__(self, prepare, run):
        self.prepare, self.run = prepare, run

    def __call__(self):  # one untimed call, for warming up and profiling
        self.run(self.prepare(1)[0])


def per_call_us(function, calls, synchronize):
    """Host microseconds per call over `calls` back-to-back calls; synchronizes after, outside the timing."""
    if isinstance(function, Batched):
        states = function.prepare(calls)
        synchronize()
        run = function.run
        start = time.perf_counter()
        for state in states:
            run(state)
    else:
        start = time.perf_counter()
        for _ in range(calls):
            function()
    elapsed = time.perf_counter() - start
    synchronize()
    return elapsed / calls * 1e6


def measure(rows, calls, repetitions, synchronize):
    """rows: [(name, {label: function})]; returns [(name, {label: median us})]."""
    results = []
    for name, functions in rows:
        samples = {label: [] for label in functions}
        for function in functions.values():
            function()
        synchronize()
        for _ in range(repetitions):
            for label, function in functions.items():
                samples[label].append(per_call_us(function, calls, synchronize))
        results.append((name, {label: statistics.median(values) for label, values in samples.items()}))
    return results


def profile(rows, name, calls, synchronize, top=30):
    """cProfile of `calls` flashrtc calls of one row (warmed first), the functions by their own time."""
    import cProfile
    import pstats
    functions = dict(rows).get(name)
    if functions is None:
        raise SystemExit(f"host_overhead.py: --profile {name!r}: no such row; rows: {[n for n, _ in rows]}")
    function = functions["flashrtc"]
    function()
    synchronize()
    states = function.prepare(calls) if isinstance(function, Batched) else None
    profiler = cProfile.Profile()
    profiler.enable()
    if states is None:
        for _ in range(calls):
            function()
    else:
        for state in states:
            function.run(state)
    profiler.disable()
    synchronize()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def gpu_rows(flashrtc, torch):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (torch.randn(SHAPE, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    with torch.inference_mode():
        for causal in (False, True):
            error = (flashrtc.attention(q, k, v, causal=causal).float()
                     - sdpa(q, k, v, is_causal=causal).float()).abs().max().item()
            if error > 2e-2:
                print(f"flashrtc disagrees with SDPA (causal={causal}): max abs difference {error}", file=sys.stderr)
                sys.exit(EXIT_MISMATCH)
    rows = [("non-causal", {"flashrtc": lambda: flashrtc.attention(q, k, v), "sdpa": lambda: sdpa(q, k, v)}),
            ("causal", {"flashrtc": lambda: flashrtc.attention(q, k, v, causal=True),
                        "sdpa": lambda: sdpa(q, k, v, is_causal=True)})]
    return rows + operator_rows(flashrtc, torch, sdpa, q, k, v)


def operator_rows(flashrtc, torch, sdpa, q, k, v, compiled=True):
    """The rows of the torch.library operator's paths (module docstring); compiled=False: on the GPU's
    stand-ins (stub_rows), without a "compiled" row or a synchronize."""
    from flashrtc import _torch_ops  # noqa: F401  (registers the operators)
    operator = torch.ops.flashrtc.attention_forward.default
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    sdpa_leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    grad = torch.randn_like(q)
    rows = [("operator", {"flashrtc": lambda: operator(q, k, v, 0, None, "bhnd", [], False),
                          "sdpa": lambda: sdpa(q, k, v)}),
            ("autograd fwd", {"flashrtc": lambda: flashrtc.attention(*leaves),
                              "sdpa": lambda: sdpa(*sdpa_leaves)})]
    try:
        flashrtc.attention(*leaves).backward(grad)
        if compiled:
            torch.cuda.synchronize()
        rows.append(("bwd", {"flashrtc": Batched(lambda n: [flashrtc.attention(*leaves) for _ in range(n)],
                                                 lambda o: o.backward(grad)),
                             "sdpa": Batched(lambda n: [sdpa(*sdpa_leaves) for _ in range(n)],
                                             lambda o: o.backward(grad))}))
        rows.append(("fwd + bwd", {"flashrtc": lambda: flashrtc.attention(*leaves).backward(grad),
                                   "sdpa": lambda: sdpa(*sdpa_leaves).backward(grad)}))
    except flashrtc.FlashrtcError as e:
        print(f"host_overhead.py: no bwd rows: {e}", file=sys.stderr)
    if compiled:
        compiled_flashrtc = torch.compile(lambda: flashrtc.attention(q, k, v), fullgraph=True)
        compiled_sdpa = torch.compile(lambda: sdpa(q, k, v), fullgraph=True)
        rows.append(("compiled", {"flashrtc": compiled_flashrtc, "sdpa": compiled_sdpa}))
    return rows


def stub_rows(flashrtc, torch):
    """gpu_rows but "compiled", without a GPU, for the Python cost of each path: python/tests/stub_cuda.py's
    CPU stand-ins for CUDA tensors, the library's C calls a C function that returns 0 at once (the ctypes
    call's own cost stays in). SDPA runs on the CPU: it computes, so it is a scale, not the GPU's figure."""
    import ctypes
    import ctypes.util
    from flashrtc import _library
    sys.path.insert(0, str(REPO / "python" / "tests"))
    import stub_cuda
    libm = ctypes.CDLL(ctypes.util.find_library("m"))

    def returns_zero(params):  # feclearexcept(mask): returns 0, reads no memory (the pointer's bits are a mask)
        function = libm["feclearexcept"]
        function.restype, function.argtypes = ctypes.c_int, [ctypes.POINTER(params)]
        return function

    stub_cuda.install(torch, returns_zero(_library.ForwardParams), returns_zero(_library.BackwardParams))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (torch.randn(SHAPE, dtype=torch.bfloat16) for _ in range(3))
    rows = [("non-causal", {"flashrtc": lambda: flashrtc.attention(q, k, v), "sdpa": lambda: sdpa(q, k, v)}),
            ("causal", {"flashrtc": lambda: flashrtc.attention(q, k, v, causal=True),
                        "sdpa": lambda: sdpa(q, k, v, is_causal=True)})]
    return rows + operator_rows(flashrtc, torch, sdpa, q, k, v, compiled=False)


def fake_rows(flashrtc, torch):
    """flashrtc alone on fake tensors: what the binding costs in Python, without torch and the library."""
    from flashrtc import _library
    library = _library.load()
    library.forward = lambda params: 0  # the C call as a no-op: its own cost is the library's, measured in C++
    q, k, v = (torch.tensor_bhnd(SHAPE, "bfloat16") for _ in range(3))
    return [("non-causal", {"flashrtc": lambda: flashrtc.attention(q, k, v)}),
            ("causal + lse", {"flashrtc": lambda: flashrtc.attention(q, k, v, causal=True, return_lse=True)})]


# The label of the call a row's flashrtc call is compared with: SDPA, or with --decode the prefill forward.
BASELINES = ("sdpa", "prefill")
DECODE_TOLERANCE = 2e-2


def decode_rows(flashrtc, torch):
    """--decode: attention_with_kvcache over a contiguous and a paged tiny cache, each beside the prefill call
    (flashrtc.attention on SHAPE); both checked against float32 first."""
    d = SHAPE[3]
    q_prefill, k_prefill, v_prefill = (torch.randn(SHAPE, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    q = torch.randn(1, 1, 1, d, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(1, 2, 1, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    seqlens = torch.full((1,), 2, dtype=torch.int32, device="cuda")
    k_pages, v_pages = (torch.zeros(1, 16, 1, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    k_pages[:, :2], v_pages[:, :2] = k, v
    table = torch.zeros(1, 1, dtype=torch.int32, device="cuda")
    weights = torch.softmax((q[0, 0].float() @ k[0, :, 0].float().T) * d ** -0.5, dim=-1)
    expected = weights @ v[0, :, 0].float()
    calls = {"decode": lambda: flashrtc.attention_with_kvcache(q, k, v, cache_seqlens=seqlens),
             "decode paged": lambda: flashrtc.attention_with_kvcache(q, k_pages, v_pages, cache_seqlens=seqlens,
                                                                     block_table=table)}
    with torch.inference_mode():
        for name, call in calls.items():
            error = (call()[0, 0].float() - expected).abs().max().item()
            if not error <= DECODE_TOLERANCE:
                print(f"flashrtc's {name} disagrees with the float32 reference: max abs difference {error}",
                      file=sys.stderr)
                sys.exit(EXIT_MISMATCH)
    prefill = lambda: flashrtc.attention(q_prefill, k_prefill, v_prefill)  # noqa: E731
    return [(name, {"flashrtc": call, "prefill": prefill}) for name, call in calls.items()]


def report(results, device, calls, repetitions, as_json):
    for name, medians in results:
        baseline = next((b for b in BASELINES if b in medians), None)
        ratio = medians["flashrtc"] / medians[baseline] if baseline else None
        if as_json:
            print(json.dumps({"device": device, "shape": list(SHAPE), "dtype": "bfloat16", "call": name,
                              "calls": calls, "repetitions": repetitions,
                              **{f"{label}_us": round(us, 3) for label, us in medians.items()},
                              "ratio": None if ratio is None else round(ratio, 3),
                              **({"ratio_of": baseline} if baseline else {})}))
    if as_json:
        return
    print(f"{device}, bf16 {list(SHAPE)}, host us per call: median of {repetitions} x {calls} back-to-back calls")
    labels = list(results[0][1])
    baseline = next((b for b in BASELINES if b in labels), None)
    ratio_title = f"   flashrtc/{baseline}" if baseline else ""
    print(f"  {'call':<14}" + "".join(f"{label:>12}" for label in labels) + ratio_title)
    for name, medians in results:
        line = f"  {name:<14}" + "".join(f"{medians[label]:>12.2f}" for label in labels)
        if baseline:
            line += f"   {medians['flashrtc'] / medians[baseline]:>12.2f}x"
        print(line)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="back-to-back calls per repetition")
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    parser.add_argument("--fake", action="store_true", help="no GPU: the binding's Python cost on a fake torch")
    parser.add_argument("--stub-kernels", action="store_true",
                        help="no GPU, real torch: each path's Python cost on CPU stand-ins, C calls that return at once")
    parser.add_argument("--profile", metavar="ROW", help="cProfile flashrtc's calls of this row instead of the table")
    parser.add_argument("--decode", action="store_true",
                        help="attention_with_kvcache (contiguous and paged cache) beside the prefill forward (GPU)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.repetitions < 1:
        parser.error("--calls and --repetitions must be >= 1")
    if args.fake and args.stub_kernels:
        parser.error("--fake and --stub-kernels exclude each other")
    if args.decode and (args.fake or args.stub_kernels):
        parser.error("--decode measures on the GPU: it excludes --fake and --stub-kernels")
    flashrtc = import_flashrtc()

    if args.fake:
        sys.path.insert(0, str(REPO / "python" / "tests"))
        import fake_torch
        with fake_torch.installed() as torch:
            rows = fake_rows(flashrtc, torch)
            if args.profile:
                profile(rows, args.profile, args.calls, lambda: None)
                return 0
            results = measure(rows, args.calls, args.repetitions, lambda: None)
        report(results, "fake torch (no GPU, C call a no-op)", args.calls, args.repetitions, args.json)
        return 0
    try:
        import torch
    except ImportError:
        print("host_overhead.py: torch is not installed: skipped", file=sys.stderr)
        return EXIT_SKIP
    if args.stub_kernels:
        rows, synchronize = stub_rows(flashrtc, torch), lambda: None
        device = "CPU stand-ins (no GPU, C calls return at once; sdpa on the CPU)"
    elif not torch.cuda.is_available():
        print("host_overhead.py: no CUDA device: skipped", file=sys.stderr)
        return EXIT_SKIP
    else:
        rows = decode_rows(flashrtc, torch) if args.decode else gpu_rows(flashrtc, torch)
        synchronize, device = torch.cuda.synchronize, torch.cuda.get_device_name()
    if args.profile:
        profile(rows, args.profile, args.calls, synchronize)
        return 0
    results = measure(rows, args.calls, args.repetitions, synchronize)
    report(results, device, args.calls, args.repetitions, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

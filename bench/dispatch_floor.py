#!/usr/bin/env python3
"""The host cost per call that a registration puts under flashrtc's operator path, without a GPU: operators
with flashrtc's schemas whose kernels only allocate the outputs (as flashrtc's do), registered from Python
(torch.library.custom_op with register_autograd, as python/flashrtc/_torch_ops.py does, and the eager
autograd.Function of flashrtc's autograd path) and from C++ (TORCH_LIBRARY with a torch::autograd::Function,
bench/dispatch_floor.cpp, built here against the installed torch). CPU tensors, bf16 [1, 1, 2, 64]; SDPA on
the same tensors for scale (it computes on the CPU). Timing as bench/host_overhead.py's.

Rows: the operator on tensors that need no grad ("operator"), on leaves that require grad ("autograd fwd"),
the backward alone ("bwd") and both ("fwd + bwd").

    python3 bench/dispatch_floor.py [--calls N] [--repetitions N] [--json] [--no-cpp]

Needs torch; the C++ column needs a C++ compiler and ninja (torch.utils.cpp_extension; about a minute to
build, cached under --build-dir) and is left out, with the reason, without them. Exit 77 without torch.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import host_overhead  # noqa: E402  (the timing and the shape)

EXIT_SKIP = 77
_LIBRARIES = []


def python_operators(torch):
    """flashrtc's two operators and autograd formula, registered as _torch_ops registers them, with
    allocating kernels; and the eager autograd.Function called through its C++ apply, as flashrtc's eager
    path calls it."""
    Tensor = torch.Tensor

    @torch.library.custom_op("dispatch_floor_py::attention_forward", mutates_args=(), device_types="cpu")
    def forward(q: Tensor, k: Tensor, v: Tensor, mask: int, scale: Optional[float], layout: str, tile: List[int],
                deterministic: bool) -> Tuple[Tensor, Tensor]:
        return torch.empty_like(q), torch.empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)

    @torch.library.custom_op("dispatch_floor_py::attention_backward", mutates_args=(), device_types="cpu")
    def backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, mask: int,
                 scale: Optional[float], layout: str, deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx, inputs, output):
        q, k, v, mask, scale, layout, _tile, deterministic = inputs
        ctx.save_for_backward(q, k, v, output[0], output[1])
        ctx.options = (mask, scale, layout, deterministic)
        ctx.mark_non_differentiable(output[1])

    def gradients(ctx, dout, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.dispatch_floor_py.attention_backward.default(dout, q, k, v, o, lse, *ctx.options)
        return dq, dk, dv, None, None, None, None, None

    forward.register_autograd(gradients, setup_context=setup_context)

    class Eager(torch.autograd.Function):
        @staticmethod
        def forward(q, k, v, options):
            return torch.empty_like(q), torch.empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)

        @staticmethod
        def setup_context(ctx, inputs, output):
            q, k, v, options = inputs
            ctx.save_for_backward(q, k, v, output[0], output[1])
            ctx.options = options
            ctx.mark_non_differentiable(output[1])

        @staticmethod
        def backward(ctx, dout, _dlse):
            q, k, v, o, lse = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None

    apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, Eager)
    return torch.ops.dispatch_floor_py.attention_forward.default, lambda q, k, v: apply(q, k, v, (0, None, "bhnd", False))


def python_library_operator(torch):
    """The forward operator defined and implemented with torch.library.Library (define, impl) instead of
    custom_op, its autograd by torch.library.register_autograd: custom_op's kernel wrappers left out."""
    library = torch.library.Library("dispatch_floor_lib", "DEF")
    library.define("attention_forward(Tensor q, Tensor k, Tensor v, SymInt mask, float? scale, str layout, "
                   "SymInt[] tile, bool deterministic) -> (Tensor, Tensor)")
    library.define("attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, SymInt mask, "
                   "float? scale, str layout, bool deterministic) -> (Tensor, Tensor, Tensor)")
    library.impl("attention_forward", lambda q, k, v, *options: (
        torch.empty_like(q), torch.empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)), "CPU")
    library.impl("attention_backward", lambda dout, q, k, v, *rest: (
        torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)), "CPU")

    def setup_context(ctx, inputs, output):
        q, k, v, mask, scale, layout, _tile, deterministic = inputs
        ctx.save_for_backward(q, k, v, output[0], output[1])
        ctx.options = (mask, scale, layout, deterministic)
        ctx.mark_non_differentiable(output[1])

    def gradients(ctx, dout, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.dispatch_floor_lib.attention_backward.default(dout, q, k, v, o, lse, *ctx.options)
        return dq, dk, dv, None, None, None, None, None

    torch.library.register_autograd("dispatch_floor_lib::attention_forward", gradients, setup_context=setup_context,
                                    lib=library)
    _LIBRARIES.append(library)  # its registrations last as long as the object
    return torch.ops.dispatch_floor_lib.attention_forward.default


def cpp_operator(torch, build_dir):
    """The C++ registration's forward operator, or None and the reason."""
    try:
        from torch.utils import cpp_extension
        Path(build_dir).mkdir(parents=True, exist_ok=True)
        cpp_extension.load(name="flashrtc_dispatch_floor", sources=[str(HERE / "dispatch_floor.cpp")],
                           is_python_module=False, build_directory=str(build_dir), verbose=False)
    except Exception as e:  # no compiler, no ninja, no headers: the reason goes to stderr
        return None, f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    return torch.ops.dispatch_floor.attention_forward.default, None


def rows(torch, build_dir, cpp=True):
    q, k, v = (torch.randn(host_overhead.SHAPE, dtype=torch.bfloat16) for _ in range(3))
    grad = torch.randn_like(q)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    py_op, eager = python_operators(torch)
    lib_op = python_library_operator(torch)
    calls = {"python custom_op": lambda *t: py_op(*t, 0, None, "bhnd", [], False)[0],
             "python Library.impl": lambda *t: lib_op(*t, 0, None, "bhnd", [], False)[0],
             "python eager Function": lambda *t: eager(*t)[0]}
    cpp_op, reason = cpp_operator(torch, build_dir) if cpp else (None, "--no-cpp")
    if cpp_op is None:
        print(f"dispatch_floor.py: no C++ column: {reason}", file=sys.stderr)
    else:
        calls["C++ TORCH_LIBRARY"] = lambda *t: cpp_op(*t, 0, None, "bhnd", [], False)[0]
    calls["sdpa"] = sdpa
    table = {}
    for label, call in calls.items():
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        if label != "python eager Function":  # it always records: it is the autograd path
            table.setdefault("operator", {})[label] = (lambda c: lambda: c(q, k, v))(call)
        table.setdefault("autograd fwd", {})[label] = (lambda c, t: lambda: c(*t))(call, leaves)
        table.setdefault("bwd", {})[label] = host_overhead.Batched(
            (lambda c, t: lambda n: [c(*t) for _ in range(n)])(call, leaves), lambda o: o.backward(grad))
        table.setdefault("fwd + bwd", {})[label] = (lambda c, t: lambda: c(*t).backward(grad))(call, leaves)
    return list(table.items())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    parser.add_argument("--build-dir", default=str(Path.home() / ".cache" / "flashrtc_dispatch_floor"))
    parser.add_argument("--no-cpp", action="store_true", help="leave out the C++ column (no build)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("dispatch_floor.py: torch is not installed: skipped", file=sys.stderr)
        return EXIT_SKIP
    results = host_overhead.measure(rows(torch, args.build_dir, not args.no_cpp), args.calls, args.repetitions,
                                    lambda: None)
    labels = list(dict.fromkeys(label for _, medians in results for label in medians))
    if args.json:
        for name, medians in results:
            print(json.dumps({"call": name, "calls": args.calls, "repetitions": args.repetitions,
                              **{f"{label}_us": round(us, 3) for label, us in medians.items()}}))
        return 0
    print(f"torch {torch.__version__}, CPU, bf16 {list(host_overhead.SHAPE)}, host us per call: median of "
          f"{args.repetitions} x {args.calls} back-to-back calls")
    print(f"  {'call':<14}" + "".join(f"{label:>24}" for label in labels))
    for name, medians in results:
        print(f"  {name:<14}" + "".join(f"{medians[label]:>24.2f}" if label in medians else f"{'':>24}"
                                        for label in labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The CUDA branches of flashrtc's PyTorch paths without a GPU, on stub_cuda.py's CPU stand-ins for CUDA
tensors with the library's C calls recorded: an eager autograd call whose signature was seen before skips
the checks yet launches the struct the checks build; the backward of every path launches the struct
prepare_backward() builds, repeated signatures from its cache; the forward's options and
torch.are_deterministic_algorithms_enabled() reach it; library errors come through both caches; no double
backward.

Usage: FLASHRTC_LIBRARY=<build>/runtime/libflashrtc.so python3 python/tests/test_eager_cpu.py. Exits 77
("skipped") without torch or the library. It changes torch for its whole process (stub_cuda.install).
"""
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

_CHECKOUT_PYTHON = Path(__file__).resolve().parents[1]
if (_CHECKOUT_PYTHON / "flashrtc" / "__init__.py").exists():
    sys.path.insert(0, str(_CHECKOUT_PYTHON))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import flashrtc  # noqa: E402
from flashrtc import _arguments, _backward, _forward, _library, _signatures  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

SKIP = ("torch is not installed" if torch is None else
        None if os.environ.get("FLASHRTC_LIBRARY") else "FLASHRTC_LIBRARY not set")
CALLS = []  # ("forward" | "backward", the struct's bytes)
STATUS = [0]  # what the recorded C calls return


def _recorder(name):
    def call(params):
        CALLS.append((name, bytes(params)))
        return STATUS[0]
    return call


if SKIP is None:
    import stub_cuda
    from flashrtc import _torch_ops
    stub_cuda.install(torch, _recorder("forward"), _recorder("backward"))


def leaves(*shapes):
    return [torch.randn(*shape, dtype=torch.bfloat16).requires_grad_() for shape in shapes]


def recorded(name):
    return [struct for called, struct in CALLS if called == name]


def without_gradient_pointers(struct: bytes) -> bytes:
    """A backward struct with dq, dk and dv's pointers cleared: autograd may hand them on as .grad or not."""
    p = _library.BackwardParams.from_buffer_copy(struct)
    p.d_q.data = p.d_k.data = p.d_v.data = None
    return bytes(p)


@unittest.skipIf(SKIP, SKIP or "")
class EagerAutograd(unittest.TestCase):
    def setUp(self):
        CALLS.clear()
        STATUS[0] = 0
        _signatures.reset_caches()
        stub_cuda.install(torch, _recorder("forward"), _recorder("backward"))  # reset_caches forgot the stream
        self.checked_calls = []
        self.saved_attention = _torch_ops.attention

        def counting(*args):
            self.checked_calls.append(args)
            return self.saved_attention(*args)
        _torch_ops.attention = counting

    def tearDown(self):
        _torch_ops.attention = self.saved_attention

    def expected_forward(self, q, k, v, o, lse, causal=False, scale=None, layout="bhnd"):
        with torch.no_grad():
            return bytes(_forward.prepare(q, k, v, causal=causal, scale=scale, layout=layout, out=o, lse_out=lse,
                                            return_lse=True).params)

    def expected_backward(self, dout, q, k, v, o, lse, causal, scale, layout, deterministic):
        call = _backward.prepare_backward(dout, q, k, v, o, lse, causal=causal, scale=scale, layout=layout,
                                          deterministic=deterministic)
        return without_gradient_pointers(bytes(call.params))

    def test_a_repeated_call_skips_the_checks_and_launches_what_they_build(self):
        cases = [dict(), dict(causal=True), dict(is_causal=True, scale=0.5), dict(causal="bottom-right"),
                 dict(layout="bnhd", scale=-2), dict(deterministic=True), dict(enable_gqa=True)]
        for options in cases:
            _signatures.reset_caches()
            stub_cuda.install(torch, _recorder("forward"), _recorder("backward"))
            q, k, v = leaves((1, 4, 5, 64), (1, 2, 9, 64), (1, 2, 9, 64))
            if options.get("layout") == "bnhd":
                q, k, v = leaves((1, 5, 2, 64), (1, 9, 2, 64), (1, 9, 2, 64))
            causal = options.get("causal", options.get("is_causal", False))
            for repeat in range(3):
                with self.subTest(options=options, repeat=repeat):
                    CALLS.clear()
                    checked = len(self.checked_calls)
                    o, lse = flashrtc.attention(q, k, v, return_lse=True, **options)
                    self.assertEqual(len(self.checked_calls), checked + (repeat == 0))  # checks on the first only
                    self.assertTrue(o.requires_grad)
                    self.assertFalse(lse.requires_grad)
                    self.assertEqual(recorded("forward"), [self.expected_forward(
                        q, k, v, o, lse, causal, options.get("scale"), options.get("layout", "bhnd"))])
                    dout = torch.randn_like(o)
                    o.backward(dout)
                    self.assertEqual([without_gradient_pointers(s) for s in recorded("backward")], [
                        self.expected_backward(dout, q, k, v, o, lse, causal, options.get("scale"),
                                               options.get("layout", "bhnd"), options.get("deterministic", False))])
            self.assertEqual((q.grad.shape, k.grad.shape), (q.shape, k.shape))

    def test_return_lse_and_the_plain_signatures_share_the_cache(self):
        q, k, v = leaves((1, 2, 5, 64), (1, 2, 5, 64), (1, 2, 5, 64))
        with torch.no_grad():
            flashrtc.attention(q, k, v, return_lse=True)  # the plain path caches the signature with the lse
        o = flashrtc.attention(q, k, v)
        self.assertEqual(self.checked_calls, [])
        self.assertTrue(o.requires_grad)
        self.assertEqual(len(recorded("forward")), 2)

    def test_what_the_fast_path_may_not_skip(self):
        q, k, v = leaves((1, 4, 5, 64), (1, 2, 5, 64), (1, 2, 5, 64))
        flashrtc.attention(q, k, v)
        for kwargs, error in ((dict(enable_gqa=False), "enable_gqa=False with 4 query heads"),
                              (dict(deterministic=1), "deterministic=1"),
                              (dict(out=torch.empty_like(q.detach())), "out= is not supported"),
                              (dict(causal=1.0), "causal=1.0")):
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(flashrtc.InvalidArgumentError, error):
                flashrtc.attention(q, k, v, **kwargs)

    def test_deterministic_from_torch(self):
        q, k, v = leaves((1, 2, 5, 64), (1, 2, 5, 64), (1, 2, 5, 64))
        saved = torch.are_deterministic_algorithms_enabled()
        try:
            for enabled in (True, False, True):
                torch.use_deterministic_algorithms(enabled)
                CALLS.clear()
                flashrtc.attention(q, k, v).sum().backward()
                p = _library.BackwardParams.from_buffer_copy(recorded("backward")[0])
                self.assertEqual(p.deterministic, int(enabled))
        finally:
            torch.use_deterministic_algorithms(saved)

    def test_a_broadcast_gradient_is_copied_into_os_layout(self):
        q, k, v = leaves((1, 2, 5, 64), (1, 2, 5, 64), (1, 2, 5, 64))
        for _ in range(2):
            CALLS.clear()
            flashrtc.attention(q, k, v).sum().backward()  # sum()'s gradient has stride 0
            p = _library.BackwardParams.from_buffer_copy(recorded("backward")[0])
            self.assertEqual((p.d_o.stride_seq, p.d_o.stride_head, p.d_o.stride_dim), (64, 320, 1))

    def test_library_errors_come_through_both_caches(self):
        q, k, v = leaves((1, 2, 5, 64), (1, 2, 5, 64), (1, 2, 5, 64))
        flashrtc.attention(q, k, v).sum().backward()
        o = flashrtc.attention(q, k, v)
        STATUS[0] = 2
        with self.assertRaises(flashrtc.UnsupportedError):
            o.sum().backward()
        with self.assertRaises(flashrtc.UnsupportedError):
            flashrtc.attention(q, k, v)

    def test_no_double_backward(self):
        q, k, v = leaves((1, 2, 5, 64), (1, 2, 5, 64), (1, 2, 5, 64))
        for _ in range(2):
            (dq,) = torch.autograd.grad(flashrtc.attention(q, k, v).sum(), q, create_graph=True)
            with self.assertRaisesRegex(RuntimeError, "once_differentiable|does not require grad"):
                dq.sum().backward()


@unittest.skipIf(SKIP, SKIP or "")
class BackwardCache(unittest.TestCase):
    """The backward operator's CUDA implementation: a signature seen before fills in pointers only."""

    def setUp(self):
        CALLS.clear()
        _signatures.reset_caches()
        stub_cuda.install(torch, _recorder("forward"), _recorder("backward"))

    def args(self, hq=4, hkv=2, n=5, d=64, dout_strides=None, layout="bhnd"):
        shape = (lambda h: (1, h, n, d)) if layout == "bhnd" else (lambda h: (1, n, h, d))
        q = torch.randn(shape(hq), dtype=torch.bfloat16)
        k, v = (torch.randn(shape(hkv), dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty_like(q)
        dout = torch.randn_like(q) if dout_strides is None else torch.empty_strided(q.shape, dout_strides,
                                                                                     dtype=q.dtype)
        return dout, q, k, v, o, torch.empty(1, hq, n, dtype=torch.float32)

    def test_a_repeated_signature_fills_in_pointers(self):
        variants = [dict(), dict(n=6), dict(hkv=4), dict(dout_strides=(4 * 5 * 64, 64, 4 * 64, 1))]  # [B, N, H, d]
        for variant in variants:
            for options in ((0, None, "bhnd", False), (1, 0.5, "bhnd", True), (2, None, "bnhd", False)):
                for _ in range(2):
                    CALLS.clear()
                    args = self.args(**variant, layout=options[2])
                    grads = _torch_ops.backward_kernel(*args, *options)
                    with self.subTest(variant=variant, options=options):
                        p = _library.BackwardParams.from_buffer_copy(recorded("backward")[0])
                        self.assertEqual((p.d_q.data, p.d_k.data, p.d_v.data), tuple(g.data_ptr() for g in grads))
                        call = _backward.prepare_backward(*args, causal=_arguments.CAUSAL_BY_MASK[options[0]],
                                                          scale=options[1], layout=options[2],
                                                          deterministic=options[3], dq=grads[0], dk=grads[1],
                                                          dv=grads[2])
                        self.assertEqual(recorded("backward")[0], bytes(call.params))
        self.assertEqual(len(_signatures.backward_signatures), len(variants) * 3)

    def test_a_mismatch_is_refused_each_time(self):
        dout, q, k, v, o, lse = self.args()
        _torch_ops.backward_kernel(dout, q, k, v, o, lse, 0, None, "bhnd", False)
        for _ in range(2):
            with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "lse has shape"):
                _torch_ops.backward_kernel(dout, q, k, v, o, lse[:, :, :4], 0, None, "bhnd", False)
            with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "dout has dtype float16"):
                _torch_ops.backward_kernel(dout.half(), q, k, v, o, lse, 0, None, "bhnd", False)
        self.assertEqual(len(recorded("backward")), 1)


@unittest.skipIf(SKIP, SKIP or "")
class Benchmarks(unittest.TestCase):
    """bench/host_overhead.py --stub-kernels and bench/dispatch_floor.py run without a GPU (the latter
    without its C++ column here: building it takes a minute)."""

    def run_json(self, script, *args):
        r = subprocess.run([sys.executable, str(_CHECKOUT_PYTHON.parent / "bench" / script), "--json", "--calls", "20",
                            "--repetitions", "2", *args], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [json.loads(line) for line in r.stdout.splitlines()]

    def test_host_overhead_stub_kernels(self):
        rows = self.run_json("host_overhead.py", "--stub-kernels")
        self.assertEqual([row["call"] for row in rows],
                         ["non-causal", "causal", "operator", "autograd fwd", "bwd", "fwd + bwd"])
        self.assertTrue(all(row["flashrtc_us"] > 0 and row["sdpa_us"] > 0 for row in rows))

    def test_dispatch_floor(self):
        rows = self.run_json("dispatch_floor.py", "--no-cpp")
        self.assertEqual([row["call"] for row in rows], ["operator", "autograd fwd", "bwd", "fwd + bwd"])
        self.assertEqual(set(rows[1]), {"call", "calls", "repetitions", "python custom_op_us",
                                        "python Library.impl_us", "python eager Function_us", "sdpa_us"})


if __name__ == "__main__":
    if SKIP:
        print(f"TESTS SKIPPED: {SKIP}")
        sys.exit(77)
    unittest.main()

"""flashrtc.attention_varlen without a GPU: the ctypes mirror of flashrtc_varlen_forward_params, argument
errors from Python and from the library (validate_varlen_forward), the struct a call builds, torch-mode
allocation (python/tests/fake_torch.py), and, with real torch, the operator's schema, its fake implementation
and an autograd formula that runs the backward operator only for a gradient actually asked for. Pointers are made up and never
dereferenced: every call stops at validation, or at NoDevice.

Usage: FLASHRTC_LIBRARY=<build>/runtime/libflashrtc.so python3 python/tests/test_varlen_cpu.py
Without FLASHRTC_LIBRARY the library's tests are skipped; without torch its tests are.
"""
import ctypes
import math
import os
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_torch  # noqa: E402
import flashrtc  # noqa: E402
from flashrtc import _library, _varlen  # noqa: E402
from test_binding_cpu import FakeCai, gpu_present  # noqa: E402

try:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
except ImportError:
    torch = None

LIBRARY = os.environ.get("FLASHRTC_LIBRARY")
NO_DEVICE = "a GPU is present: a valid call would launch on fake pointers"


def varlen_args(b=3, total_q=40, total_k=50, hq=4, hkv=2, d=64, typestr="<f2"):
    """A valid call on __cuda_array_interface__ stand-ins: B sequences packed into total_q queries and
    total_k keys, contiguous [total, H, d]."""
    return dict(q=FakeCai((total_q, hq, d), typestr), k=FakeCai((total_k, hkv, d), typestr),
                v=FakeCai((total_k, hkv, d), typestr), cu_seqlens_q=FakeCai((b + 1,), "<i4"),
                cu_seqlens_k=FakeCai((b + 1,), "<i4"), max_seqlen_q=min(20, total_q),
                max_seqlen_k=min(30, total_k), out=FakeCai((total_q, hq, d), typestr))


POSITIONAL = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")


def split(args):
    args = dict(args)
    return [args.pop(name) for name in POSITIONAL], args


def call_varlen(args, **options):
    positional, keywords = split(args)
    return flashrtc.attention_varlen(*positional, **keywords, **options)


def prepare(args, **options):
    positional, keywords = split(args)
    return _varlen.prepare_varlen(*positional, **keywords, **options)


class StructLayout(unittest.TestCase):
    """The ctypes mirror matches tests/cpu/test_c_api.cpp's pinned size and offsets."""

    def test_varlen_forward_params(self):
        P = _library.VarlenForwardParams
        self.assertEqual(ctypes.sizeof(P), 304)
        offsets = {"struct_size": 0, "dtype": 4, "batch": 8, "total_q": 16, "total_k": 24, "max_seqlen_q": 32,
                   "max_seqlen_k": 40, "heads_q": 48, "head_dim": 64, "q": 72, "o": 192, "cu_seqlens_q": 232,
                   "cu_seqlens_k": 240, "seqused_k": 248, "lse": 256, "softmax_scale": 264,
                   "has_softmax_scale": 268, "mask": 272, "block_m": 276, "stages": 288, "stream": 296}
        self.assertEqual({name: getattr(P, name).offset for name in offsets}, offsets)

    def test_varlen_backward_params(self):
        P = _library.VarlenBackwardParams
        self.assertEqual(ctypes.sizeof(P), 528)
        offsets = {"struct_size": 0, "dtype": 4, "batch": 8, "total_k": 24, "max_seqlen_k": 40, "head_dim": 64,
                   "q": 72, "o": 192, "d_o": 232, "lse": 272, "d_q": 280, "d_v": 360, "cu_seqlens_q": 400,
                   "seqused_k": 416, "softmax_scale": 424, "has_softmax_scale": 428, "mask": 432, "block_m": 436,
                   "stages": 448, "stream": 456, "variants": 464, "d_sinks": 512, "deterministic": 520}
        self.assertEqual({name: getattr(P, name).offset for name in offsets}, offsets)

    @unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
    def test_the_library_fills_the_backward_defaults(self):
        p = _library.load().new_optional_params(_library.VarlenBackwardParams, "flashrtc_attention_varlen_backward")
        self.assertEqual(p.struct_size, 528)
        self.assertEqual((p.q.stride_dim, p.d_o.stride_dim, p.d_q.stride_dim, p.d_v.stride_dim), (1, 1, 1, 1))
        self.assertEqual((p.mask, p.has_softmax_scale, p.block_m, p.stages, p.deterministic), (0, 0, 0, 0, 0))
        self.assertEqual((p.lse, p.cu_seqlens_q, p.seqused_k, p.stream), (None, None, None, None))

    @unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
    def test_the_library_fills_the_defaults(self):
        p = _library.load().new_optional_params(_library.VarlenForwardParams, "flashrtc_attention_varlen_forward")
        self.assertEqual(p.struct_size, 304)
        self.assertEqual((p.q.stride_dim, p.k.stride_dim, p.v.stride_dim, p.o.stride_dim), (1, 1, 1, 1))
        self.assertEqual((p.mask, p.has_softmax_scale, p.softmax_scale, p.block_m, p.stages), (0, 0, 0.0, 0, 0))
        self.assertEqual((p.cu_seqlens_q, p.seqused_k, p.lse, p.stream), (None, None, None, None))


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class Marshalling(unittest.TestCase):
    """What prepare_varlen hands to the library."""

    def test_fields(self):
        args = varlen_args(b=3, total_q=40, total_k=50, hq=4, hkv=2, d=64)
        lse = FakeCai((4, 40), "<f4")
        used = FakeCai((3,), "<i4")
        p = prepare(args, causal=True, softmax_scale=0.25, seqused_k=used, lse_out=lse, config=(64, 32, 4, 1),
                    stream=0x1234).params
        self.assertEqual((p.batch, p.total_q, p.total_k, p.max_seqlen_q, p.max_seqlen_k), (3, 40, 50, 20, 30))
        self.assertEqual((p.heads_q, p.heads_kv, p.head_dim, p.dtype), (4, 2, 64, _library.DTYPES["float16"]))
        for name, rows in (("q", 4), ("k", 2), ("v", 2), ("o", 4)):
            t = getattr(p, name)
            self.assertEqual((t.stride_batch, t.stride_seq, t.stride_head, t.stride_dim), (0, rows * 64, 64, 1))
        self.assertEqual(p.q.data, args["q"].interface["data"][0])
        self.assertEqual(p.o.data, args["out"].interface["data"][0])
        self.assertEqual(p.cu_seqlens_q, args["cu_seqlens_q"].interface["data"][0])
        self.assertEqual(p.cu_seqlens_k, args["cu_seqlens_k"].interface["data"][0])
        self.assertEqual(p.seqused_k, used.interface["data"][0])
        self.assertEqual(p.lse, lse.interface["data"][0])
        # causal=True is bottom-right per sequence, flash_attn_varlen_func's meaning.
        self.assertEqual(p.mask, _library.MASK_CAUSAL_BOTTOM_RIGHT)
        self.assertEqual((p.has_softmax_scale, p.softmax_scale), (1, 0.25))
        self.assertEqual((p.block_m, p.block_n, p.warps, p.stages), (64, 32, 4, 1))
        self.assertEqual(p.stream, 0x1234)

    def test_defaults(self):
        p = prepare(varlen_args(typestr="<f2")).params
        self.assertEqual((p.mask, p.has_softmax_scale, p.block_m, p.warps), (_library.MASK_NONE, 0, 0, 0))
        self.assertEqual((p.seqused_k, p.lse, p.stream), (None, None, None))

    def test_a_strided_q_and_one_sequence(self):
        # A view of every other token: the stride is the tensor's, not its shape's.
        args = varlen_args(b=1, total_q=7, total_k=9, hq=2, hkv=2, d=32)
        args["q"] = FakeCai((7, 2, 32), "<f2", strides=(2 * 2 * 32 * 2, 32 * 2, 2))
        args["max_seqlen_q"], args["max_seqlen_k"] = 7, 9
        p = prepare(args).params
        self.assertEqual((p.batch, p.q.stride_seq, p.q.stride_head), (1, 2 * 2 * 32, 32))

    @unittest.skipIf(gpu_present(), NO_DEVICE)
    def test_valid_calls_reach_the_device_check(self):
        with self.assertRaises(flashrtc.NoDeviceError):
            call_varlen(varlen_args(), causal=True)
        with self.assertRaises(flashrtc.NoDeviceError):
            call_varlen(varlen_args(), seqused_k=FakeCai((3,), "<i4"), lse_out=FakeCai((4, 40), "<f4"),
                        return_lse=True)
        no_keys = varlen_args(total_k=0)  # every sequence empty of keys: a valid call
        no_keys["max_seqlen_k"] = 0
        with self.assertRaises(flashrtc.NoDeviceError):
            call_varlen(no_keys)


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class ArgumentErrors(unittest.TestCase):
    """Each mistake is an InvalidArgumentError (TypeError for a non-tensor) naming what is wrong, whether
    Python or the library finds it."""

    def assert_refused(self, args, names, **options):
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            call_varlen(args, **options)
        self.assertIn(names, str(caught.exception))

    def test_python_side(self):
        cases = [
            ("q of 4 dims (a padded batch)", dict(q=FakeCai((2, 20, 4, 64))), {}, "q has shape"),
            ("k of 2 dims", dict(k=FakeCai((50, 128))), {}, "k has shape"),
            ("v another shape", dict(v=FakeCai((49, 2, 64))), {}, "v"),
            ("head dims differ", dict(k=FakeCai((50, 2, 32)), v=FakeCai((50, 2, 32))), {}, "head dim"),
            ("fp32 k, fp16 q", dict(k=FakeCai((50, 2, 64), "<f4")), {}, "k has dtype"),
            ("float64 q", dict(q=FakeCai((40, 4, 64), "<f8")), {}, "q has dtype"),
            ("int64 cu_seqlens_q", dict(cu_seqlens_q=FakeCai((4,), "<i8")), {}, "cu_seqlens_q has dtype"),
            ("cu_seqlens_q of 2 dims", dict(cu_seqlens_q=FakeCai((4, 1), "<i4")), {}, "cu_seqlens_q has shape"),
            ("cu_seqlens_q of one entry", dict(cu_seqlens_q=FakeCai((1,), "<i4")), {}, "B >= 1"),
            ("cu_seqlens_k of another batch", dict(cu_seqlens_k=FakeCai((3,), "<i4")), {},
             "cu_seqlens_k has shape"),
            ("strided cu_seqlens_k", dict(cu_seqlens_k=FakeCai((4,), "<i4", strides=(8,))), {},
             "cu_seqlens_k has strides"),
            ("seqused_k of [B + 1]", {}, dict(seqused_k=FakeCai((4,), "<i4")), "seqused_k has shape"),
            ("float seqused_k", {}, dict(seqused_k=FakeCai((3,), "<f4")), "seqused_k has dtype"),
            ("a float max_seqlen_q", dict(max_seqlen_q=20.0), {}, "max_seqlen_q="),
            ("a bool max_seqlen_k", dict(max_seqlen_k=True), {}, "max_seqlen_k="),
            ("max_seqlen_k beyond int64", dict(max_seqlen_k=1 << 70), {}, "max_seqlen_k"),
            ("causal 'bottom-right'", {}, dict(causal="bottom-right"), "causal="),
            ("causal 1", {}, dict(causal=1), "causal="),
            ("a tile of 3 values", {}, dict(config=(64, 64, 4)), "config="),
            ("out of another shape", dict(out=FakeCai((40, 4, 32))), {}, "out is"),
            ("read-only out", dict(out=FakeCai((40, 4, 64), readonly=True)), {}, "out is read-only"),
            ("lse_out of [B, Hq, N]", {}, dict(lse_out=FakeCai((1, 4, 40), "<f4")), "lse_out has shape"),
            ("lse_out of [total_q, Hq]", {}, dict(lse_out=FakeCai((40, 4), "<f4")), "lse_out has shape"),
            ("fp16 lse_out", {}, dict(lse_out=FakeCai((4, 40), "<f2")), "lse_out has dtype"),
            ("strided lse_out", {}, dict(lse_out=FakeCai((4, 40), "<f4", strides=(4 * 48, 4))), "lse_out has strides"),
            ("no out without torch", dict(out=None), {}, "pass out="),
            ("return_lse without torch nor lse_out", {}, dict(return_lse=True), "pass lse_out="),
        ]
        for what, change, options, names in cases:
            with self.subTest(what):
                self.assert_refused({**varlen_args(), **change}, names, **options)
        with self.assertRaises(TypeError):
            call_varlen({**varlen_args(), "cu_seqlens_q": [0, 10, 20, 40]})

    def test_library_side(self):
        cases = [
            ("max_seqlen_q 0", dict(max_seqlen_q=0), {}, "max_seqlen_q"),
            ("max_seqlen_q past total_q", dict(max_seqlen_q=41), {}, "max_seqlen_q"),
            ("max_seqlen_k past total_k", dict(max_seqlen_k=51), {}, "max_seqlen_k"),
            ("max_seqlen_k -1", dict(max_seqlen_k=-1), {}, "max_seqlen_k"),
            ("head_dim 12", dict(q=FakeCai((40, 4, 12)), k=FakeCai((50, 2, 12)), v=FakeCai((50, 2, 12)),
                                 out=FakeCai((40, 4, 12))), {}, "head_dim"),
            ("heads_q not a multiple", dict(q=FakeCai((40, 3, 64)), out=FakeCai((40, 3, 64))), {}, "heads_q"),
            ("a NaN scale", {}, dict(softmax_scale=math.nan), "softmax_scale"),
            ("misaligned cu_seqlens_q", dict(cu_seqlens_q=FakeCai((4,), "<i4", ptr=0x7E0000000002)), {},
             "cu_seqlens_q"),
            ("misaligned k", dict(k=FakeCai((50, 2, 64), ptr=0x7E0000000008)), {}, "k.data"),
            ("tile block_n 12", {}, dict(config=(64, 12, 4, 1)), "block_n"),
        ]
        for what, change, options, names in cases:
            with self.subTest(what):
                self.assert_refused({**varlen_args(), **change}, names, **options)


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class TorchMode(unittest.TestCase):
    """Torch tensors (fake_torch.py): flashrtc allocates out [total_q, Hq, d] and the lse [Hq, total_q], on
    the current stream; a CPU tensor is refused."""

    def test_outputs(self):
        with fake_torch.installed() as torch_:
            q = torch_.tensor_bhnd((40, 4, 64), "bfloat16")
            k = torch_.tensor_bhnd((50, 2, 64), "bfloat16")
            v = torch_.tensor_bhnd((50, 2, 64), "bfloat16")
            cu_q, cu_k = torch_.tensor_bhnd((4,), "int32"), torch_.tensor_bhnd((4,), "int32")
            call = _varlen.prepare_varlen(q, k, v, cu_q, cu_k, 20, 30, return_lse=True)
            self.assertEqual((call.out.shape, call.out.stride(), str(call.out.dtype)),
                             ((40, 4, 64), (4 * 64, 64, 1), "torch.bfloat16"))
            self.assertEqual((call.lse.shape, call.lse.stride(), str(call.lse.dtype)),
                             ((4, 40), (40, 1), "torch.float32"))
            self.assertEqual(call.params.dtype, _library.DTYPES["bfloat16"])
            self.assertEqual((call.params.lse, call.params.stream), (call.lse.data_ptr(), None))
            self.assertIsNone(_varlen.prepare_varlen(q, k, v, cu_q, cu_k, 20, 30).lse)
            torch_.state["streams"][0] = 0x1234
            self.assertEqual(_varlen.prepare_varlen(q, k, v, cu_q, cu_k, 20, 30).params.stream, 0x1234)
            cu_cpu = torch_.tensor_bhnd((4,), "int32", device_type="cpu")
            with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
                flashrtc.attention_varlen(q, k, v, cu_cpu, cu_k, 20, 30)
            self.assertIn("cu_seqlens_q is on", str(caught.exception))
            cu_other = torch_.tensor_bhnd((4,), "int32", index=1)
            with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
                flashrtc.attention_varlen(q, k, v, cu_q, cu_other, 20, 30)
            self.assertIn("one device", str(caught.exception))

    @unittest.skipIf(gpu_present(), NO_DEVICE)
    def test_a_valid_torch_call_reaches_the_device_check(self):
        with fake_torch.installed() as torch_:
            q = torch_.tensor_bhnd((40, 4, 64), "float16")
            k = torch_.tensor_bhnd((50, 4, 64), "float16")
            cu = torch_.tensor_bhnd((4,), "int32")
            with self.assertRaises(flashrtc.NoDeviceError):
                flashrtc.attention_varlen(q, k, k, cu, cu, 20, 30, causal=True, return_lse=True)
            torch_.state["grad"] = False  # requires_grad under no_grad: the plain path, no operator
            q.requires_grad = True
            with self.assertRaises(flashrtc.NoDeviceError):
                flashrtc.attention_varlen(q, k, k, cu, cu, 20, 30)


@unittest.skipUnless(torch is not None, "torch is not installed")
class Operator(unittest.TestCase):
    """The torch.library operator: its fake implementation's outputs (what torch.compile and CUDA-graph
    capture plan with), and an autograd formula whose backward runs only when a gradient is asked for."""

    @classmethod
    def setUpClass(cls):
        from flashrtc import _torch_ops
        cls.ops = _torch_ops

    def test_schema_writes_nothing(self):
        for op in (torch.ops.flashrtc.attention_varlen, torch.ops.flashrtc.attention_varlen_backward):
            arguments = op.default._schema.arguments
            self.assertFalse(any(a.alias_info is not None and a.alias_info.is_write for a in arguments))

    def test_fake_implementation(self):
        with FakeTensorMode():
            q = torch.empty((37, 8, 128), dtype=torch.bfloat16, device="cuda")
            k = torch.empty((51, 2, 128), dtype=torch.bfloat16, device="cuda")
            cu = torch.empty((5,), dtype=torch.int32, device="cuda")
            o, lse = torch.ops.flashrtc.attention_varlen.default(q, k, k, cu, cu, 16, 20, None, True, None, [],
                                                                 False)
            self.assertEqual((tuple(o.shape), o.dtype, o.is_contiguous()), ((37, 8, 128), torch.bfloat16, True))
            self.assertEqual((tuple(lse.shape), lse.dtype, lse.is_contiguous()), ((8, 37), torch.float32, True))
            used = torch.empty((4,), dtype=torch.int32, device="cuda")
            o, lse = torch.ops.flashrtc.attention_varlen.default(q, k, k, cu, cu, 16, 20, 0.5, False, used,
                                                                 [64, 64, 4, 1], True)
            self.assertEqual((tuple(o.shape), tuple(lse.shape)), ((37, 8, 128), (8, 37)))
            dq, dk, dv = torch.ops.flashrtc.attention_varlen_backward.default(o, q, k, k, o, lse, cu, cu, 16, 20,
                                                                              None, True, None, False)
            self.assertEqual((tuple(dq.shape), tuple(dk.shape), tuple(dv.shape)),
                             ((37, 8, 128), (51, 2, 128), (51, 2, 128)))
            with self.assertRaises(flashrtc.InvalidArgumentError):
                torch.ops.flashrtc.attention_varlen.default(q.view(1, 37, 8, 128), k, k, cu, cu, 16, 20, None,
                                                            False, None, [], False)

    def test_backward_runs_only_when_asked(self):
        # CPU stand-ins for the CUDA kernels: the forward gives zeros, the backward records what the autograd
        # formula hands it and returns marked gradients.
        def forward(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, seqused_k, tile, deterministic):
            return torch.zeros_like(q), torch.zeros((q.shape[1], q.shape[0]), dtype=torch.float32)

        calls = []

        def backward(dout, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, scale, causal, seqused_k, deterministic):
            calls.append((dout.clone(), lse.shape, cu_q, cu_k, max_q, max_k, scale, causal, seqused_k,
                          deterministic))
            return torch.full_like(q, 1.0), torch.full_like(k, 2.0), torch.full_like(v, 3.0)

        library = torch.library.Library("flashrtc", "IMPL")
        library.impl("attention_varlen", forward, "CPU")
        library.impl("attention_varlen_backward", backward, "CPU")
        q = torch.randn((6, 2, 64), requires_grad=True)
        k = torch.randn((9, 1, 64), requires_grad=True)
        v = torch.randn((9, 1, 64), requires_grad=True)
        cu_q, cu_k = torch.tensor([0, 2, 6], dtype=torch.int32), torch.tensor([0, 4, 9], dtype=torch.int32)
        used = torch.tensor([3, 5], dtype=torch.int32)
        o, lse = torch.ops.flashrtc.attention_varlen.default(q, k, v, cu_q, cu_k, 4, 5, 0.5, True, used, [], True)
        self.assertTrue(o.requires_grad)  # recorded: the forward runs under autograd
        self.assertFalse(lse.requires_grad)
        (q * 2).sum().backward()  # a gradient that does not flow through the call runs no varlen backward
        self.assertTrue(torch.equal(q.grad, torch.full_like(q, 2)))
        self.assertEqual(calls, [])
        q.grad = None
        (o * 3).sum().backward()
        self.assertEqual(len(calls), 1)
        dout, lse_shape, got_cu_q, got_cu_k, max_q, max_k, scale, causal, got_used, deterministic = calls[0]
        self.assertIs(deterministic, True)  # the forward's, handed to the backward
        self.assertTrue(torch.equal(dout, torch.full_like(q, 3.0)))
        self.assertEqual((lse_shape, max_q, max_k, scale, causal), ((2, 6), 4, 5, 0.5, True))
        self.assertTrue(torch.equal(got_cu_q, cu_q) and torch.equal(got_cu_k, cu_k) and torch.equal(got_used, used))
        self.assertTrue(torch.equal(q.grad, torch.full_like(q, 1.0)))
        self.assertTrue(torch.equal(k.grad, torch.full_like(k, 2.0)))
        self.assertTrue(torch.equal(v.grad, torch.full_like(v, 3.0)))

    def test_python_checks_before_the_operator(self):
        q = torch.zeros((6, 2, 64), requires_grad=True)
        cu = torch.zeros((3,), dtype=torch.int32)
        cases = [
            ("a CPU q", dict(), "q is on"),
            ("out=", dict(out=torch.zeros((6, 2, 64))), "out= is not supported"),
            ("a stream", dict(stream=0), "stream= is not supported"),
        ]
        for what, options, names in cases:
            with self.subTest(what):
                with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
                    flashrtc.attention_varlen(q, q, q, cu, cu, 4, 4, **options)
                self.assertIn(names, str(caught.exception))


if __name__ == "__main__":
    unittest.main()

"""flashrtc.attention_with_kvcache and flashrtc.merge_states without a GPU: the ctypes mirrors of the C structs,
argument errors from Python and from the library (validate_kvcache), the structs the calls build, torch-mode
allocation (python/tests/fake_torch.py), and, with real torch, the operators' schemas and fake
implementations and the refusal of gradients. Pointers are made up and never dereferenced: every call stops
at validation, or at NoDevice.

Usage: FLASHRTC_LIBRARY=<build>/runtime/libflashrtc.so python3 python/tests/test_kvcache_cpu.py
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
from flashrtc import _kvcache, _library  # noqa: E402
from test_binding_cpu import FakeCai, gpu_present  # noqa: E402

try:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
except ImportError:
    torch = None

LIBRARY = os.environ.get("FLASHRTC_LIBRARY")
NO_DEVICE = "a GPU is present: a valid call would launch on fake pointers"


def decode_args(b=2, nq=1, hq=8, hkv=2, d=64, pages=2, page=128, nnew=1, typestr="<f2"):
    """A valid decode call on __cuda_array_interface__ stand-ins: contiguous cache, one appended token."""
    return dict(q=FakeCai((b, nq, hq, d), typestr), k_cache=FakeCai((pages, page, hkv, d), typestr),
                v_cache=FakeCai((pages, page, hkv, d), typestr), k=FakeCai((b, nnew, hkv, d), typestr),
                v=FakeCai((b, nnew, hkv, d), typestr), cache_seqlens=FakeCai((b,), "<i4"),
                out=FakeCai((b, nq, hq, d), typestr))


def merge_args(b=2, n=3, h=4, d=64, typestr="<f4"):
    return dict(o_a=FakeCai((b, n, h, d), typestr), lse_a=FakeCai((b, h, n), "<f4"),
                o_b=FakeCai((b, n, h, d), typestr), lse_b=FakeCai((b, h, n), "<f4"),
                out=FakeCai((b, n, h, d), typestr), lse_out=FakeCai((b, h, n), "<f4"))


def call_kvcache(args, **options):
    args = dict(args)
    return flashrtc.attention_with_kvcache(args.pop("q"), args.pop("k_cache"), args.pop("v_cache"),
                                           args.pop("k", None), args.pop("v", None), **args, **options)


def call_merge(args):
    args = dict(args)
    return flashrtc.merge_states(args.pop("o_a"), args.pop("lse_a"), args.pop("o_b"), args.pop("lse_b"), **args)


class StructLayout(unittest.TestCase):
    """The ctypes mirrors match tests/cpu/test_c_api.cpp's pinned sizes and offsets."""

    def test_kvcache_params(self):
        P = _library.KvCacheParams
        self.assertEqual(ctypes.sizeof(P), 400)
        offsets = {"struct_size": 0, "dtype": 4, "q": 48, "num_pages": 168, "block_table": 184,
                   "cache_seqlens": 208, "k_new": 224, "seqlen_new": 304, "o": 312, "lse": 352,
                   "softmax_scale": 360, "mask": 368, "num_splits": 372, "block_m": 376, "stream": 392}
        self.assertEqual({name: getattr(P, name).offset for name in offsets}, offsets)

    def test_merge_states_params(self):
        P = _library.MergeStatesParams
        self.assertEqual(ctypes.sizeof(P), 192)
        offsets = {"o_a": 40, "lse_a": 120, "o": 136, "lse": 176, "stream": 184}
        self.assertEqual({name: getattr(P, name).offset for name in offsets}, offsets)

    @unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
    def test_the_library_fills_the_defaults(self):
        library = _library.load()
        p = library.new_optional_params(_library.KvCacheParams, "flashrtc_attention_with_kvcache")
        self.assertEqual(p.struct_size, 400)
        self.assertEqual((p.q.stride_dim, p.k_cache.stride_dim, p.k_new.stride_dim, p.o.stride_dim), (1, 1, 1, 1))
        self.assertEqual((p.num_splits, p.mask, p.has_softmax_scale), (0, 0, 0))
        m = library.new_optional_params(_library.MergeStatesParams, "flashrtc_merge_states")
        self.assertEqual((m.struct_size, m.o_a.stride_dim, m.o.stride_dim), (192, 1, 1))


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class Marshalling(unittest.TestCase):
    """What prepare_kvcache and prepare_merge hand to the library."""

    def test_contiguous_cache_with_append(self):
        args = decode_args(b=2, nq=3, hq=8, hkv=2, d=64, pages=4, page=96, nnew=2)
        q, kc, vc, k, v = (args.pop(n) for n in ("q", "k_cache", "v_cache", "k", "v"))
        p = _kvcache.prepare_kvcache(q, kc, vc, k, v, causal=True, num_splits=3, softmax_scale=0.25,
                                     **args).params
        self.assertEqual((p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.head_dim), (2, 3, 8, 2, 64))
        self.assertEqual((p.num_pages, p.page_size, p.seqlen_new), (4, 96, 2))
        self.assertEqual((p.q.stride_batch, p.q.stride_seq, p.q.stride_head), (3 * 8 * 64, 8 * 64, 64))
        self.assertEqual(p.k_cache.stride_batch, 96 * 2 * 64)
        self.assertEqual(p.mask, _library.MASK_CAUSAL_BOTTOM_RIGHT)
        self.assertEqual((p.num_splits, p.has_softmax_scale, p.softmax_scale), (3, 1, 0.25))
        self.assertEqual(p.cache_seqlens, args["cache_seqlens"].interface["data"][0])
        self.assertIsNone(p.block_table)
        self.assertIsNone(p.lse)

    def test_paged_cache(self):
        args = decode_args(b=3, pages=10, page=16)
        table = FakeCai((3, 5), "<i4", strides=(8 * 4, 4))  # a padded row: the stride is the row's, not 5
        args["block_table"] = table
        lse = FakeCai((3, 8, 1), "<f4")
        q, kc, vc, k, v = (args.pop(n) for n in ("q", "k_cache", "v_cache", "k", "v"))
        p = _kvcache.prepare_kvcache(q, kc, vc, k, v, lse_out=lse, **args).params
        self.assertEqual((p.num_pages, p.page_size, p.max_pages_per_seq, p.block_table_stride), (10, 16, 5, 8))
        self.assertEqual(p.block_table, table.interface["data"][0])
        self.assertEqual(p.lse, lse.interface["data"][0])
        self.assertEqual(p.mask, _library.MASK_NONE)

    def test_merge(self):
        p = _kvcache.prepare_merge(**merge_args(b=2, n=3, h=4, d=32)).params
        self.assertEqual((p.batch, p.seqlen, p.heads, p.head_dim, p.dtype), (2, 3, 4, 32, 0))
        self.assertEqual((p.o_a.stride_batch, p.o_a.stride_seq, p.o_a.stride_head), (3 * 4 * 32, 4 * 32, 32))

    @unittest.skipIf(gpu_present(), NO_DEVICE)
    def test_valid_calls_reach_the_device_check(self):
        with self.assertRaises(flashrtc.NoDeviceError):
            call_kvcache(decode_args(), causal=True)
        paged = decode_args(pages=10, page=16)
        paged["block_table"] = FakeCai((2, 5), "<i4")
        with self.assertRaises(flashrtc.NoDeviceError):
            call_kvcache(paged)
        with self.assertRaises(flashrtc.NoDeviceError):
            call_merge(merge_args())


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class ArgumentErrors(unittest.TestCase):
    """Each mistake is an InvalidArgumentError (TypeError for a non-tensor) naming what is wrong, whether
    Python or the library finds it."""

    def assert_refused(self, args, names, **options):
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            call_kvcache(args, **options)
        self.assertIn(names, str(caught.exception))

    def test_python_side(self):
        cases = [
            ("q of 3 dims", dict(q=FakeCai((2, 8, 64))), {}, "q has shape"),
            ("k_cache of 3 dims", dict(k_cache=FakeCai((2, 128, 128))), {}, "k_cache has shape"),
            ("v_cache another shape", dict(v_cache=FakeCai((2, 64, 2, 64))), {}, "v_cache"),
            ("head dims differ", dict(k_cache=FakeCai((2, 128, 2, 32)), v_cache=FakeCai((2, 128, 2, 32))), {},
             "head dim"),
            ("fp32 cache, fp16 q", dict(k_cache=FakeCai((2, 128, 2, 64), "<f4")), {}, "k_cache has dtype"),
            ("k without v", dict(v=None), {}, "without"),
            ("k of another batch", dict(k=FakeCai((3, 1, 2, 64)), v=FakeCai((3, 1, 2, 64))), {}, "k has shape"),
            ("float cache_seqlens", dict(cache_seqlens=FakeCai((2,), "<f4")), {}, "cache_seqlens has dtype"),
            ("cache_seqlens of [3]", dict(cache_seqlens=FakeCai((3,), "<i4")), {}, "cache_seqlens has shape"),
            ("strided cache_seqlens", dict(cache_seqlens=FakeCai((2,), "<i4", strides=(8,))), {},
             "cache_seqlens has strides"),
            ("block_table of 1 dim", dict(block_table=FakeCai((2,), "<i4")), {}, "block_table has shape"),
            ("block_table of another batch", dict(block_table=FakeCai((3, 4), "<i4")), {}, "block_table"),
            ("cache_batch_idx int64", dict(cache_batch_idx=FakeCai((2,), "<i8")), {}, "cache_batch_idx"),
            ("read-only cache", dict(k_cache=FakeCai((2, 128, 2, 64), readonly=True)), {}, "k_cache is read-only"),
            ("an int cache_seqlens without torch", dict(cache_seqlens=5), {}, "cache_seqlens=5"),
            ("out of another shape", dict(out=FakeCai((2, 1, 4, 64))), {}, "out is"),
            ("causal 'bottom-right'", {}, dict(causal="bottom-right"), "causal="),
            ("num_splits beyond int32", {}, dict(num_splits=1 << 40), "num_splits"),
            ("lse_out of the wrong shape", dict(lse_out=FakeCai((2, 1, 8), "<f4")), {}, "lse_out has shape"),
        ]
        for what, change, options, names in cases:
            with self.subTest(what):
                self.assert_refused({**decode_args(), **change}, names, **options)
        with self.assertRaises(TypeError):
            call_kvcache({**decode_args(), "k_cache": [1, 2]})

    def test_library_side(self):
        cases = [
            ("num_splits 300", {}, dict(num_splits=300), "num_splits=300"),
            ("head_dim 12", dict(q=FakeCai((2, 1, 8, 12)), k_cache=FakeCai((2, 128, 2, 12)),
                                 v_cache=FakeCai((2, 128, 2, 12)), k=FakeCai((2, 1, 2, 12)),
                                 v=FakeCai((2, 1, 2, 12)), out=FakeCai((2, 1, 8, 12))), {}, "head_dim"),
            ("heads_q not a multiple", dict(q=FakeCai((2, 1, 3, 64)), out=FakeCai((2, 1, 3, 64))), {}, "heads_q"),
            ("a NaN scale", {}, dict(softmax_scale=math.nan), "softmax_scale"),
            ("append without cache_seqlens", dict(cache_seqlens=None), {}, "cache_seqlens"),
            ("paged, page_size 100", dict(k_cache=FakeCai((4, 100, 2, 64)), v_cache=FakeCai((4, 100, 2, 64)),
                                          block_table=FakeCai((2, 2), "<i4")), {}, "page_size"),
            ("cache_batch_idx with a table", dict(block_table=FakeCai((2, 1), "<i4"),
                                                  cache_batch_idx=FakeCai((2,), "<i4")), {}, "cache_batch_idx"),
            ("misaligned cache", dict(k_cache=FakeCai((2, 128, 2, 64), ptr=0x7E0000000008)), {}, "k_cache"),
        ]
        for what, change, options, names in cases:
            with self.subTest(what):
                self.assert_refused({**decode_args(), **change}, names, **options)

    def test_merge_states(self):
        cases = [
            ("o_b another shape", dict(o_b=FakeCai((2, 3, 4, 32), "<f4")), "o_b"),
            ("fp16 lse", dict(lse_a=FakeCai((2, 4, 3), "<f2")), "lse_a has dtype"),
            ("lse of [B, N, H]", dict(lse_b=FakeCai((2, 3, 4), "<f4")), "lse_b has shape"),
            ("head_dim 12", dict(o_a=FakeCai((2, 3, 4, 12), "<f4"), o_b=FakeCai((2, 3, 4, 12), "<f4"),
                                 out=FakeCai((2, 3, 4, 12), "<f4")), "head_dim"),
        ]
        for what, change, names in cases:
            with self.subTest(what):
                with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
                    call_merge({**merge_args(), **change})
                self.assertIn(names, str(caught.exception))
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            call_merge({**merge_args(), "lse_out": None})
        self.assertIn("lse_out=", str(caught.exception))


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class TorchMode(unittest.TestCase):
    """Torch tensors (fake_torch.py): flashrtc allocates the outputs, an int cache_seqlens becomes a tensor,
    and a call autograd would record is refused."""

    def test_outputs_and_int_seqlens(self):
        with fake_torch.installed() as torch_:
            q = torch_.tensor_bhnd((2, 3, 8, 64), "float16")
            kc = torch_.tensor_bhnd((2, 128, 2, 64), "float16")
            vc = torch_.tensor_bhnd((2, 128, 2, 64), "float16")
            call = _kvcache.prepare_kvcache(q, kc, vc, cache_seqlens=17, return_lse=True)
            self.assertEqual((call.out.shape, call.out.stride()), ((2, 3, 8, 64), (3 * 8 * 64, 8 * 64, 64, 1)))
            self.assertEqual((call.lse.shape, str(call.lse.dtype)), ((2, 8, 3), "torch.float32"))
            self.assertIsNotNone(call.params.cache_seqlens)
            self.assertEqual(call.params.stream, None)
            torch_.state["streams"][0] = 0x1234
            self.assertEqual(_kvcache.prepare_kvcache(q, kc, vc).params.stream, 0x1234)
            q_cpu = torch_.tensor_bhnd((2, 3, 8, 64), "float16", device_type="cpu")
            with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
                flashrtc.attention_with_kvcache(q_cpu, kc, vc)
            self.assertIn("q is on", str(caught.exception))

    @unittest.skipIf(gpu_present(), NO_DEVICE)
    def test_a_valid_torch_call_reaches_the_device_check(self):
        with fake_torch.installed() as torch_:
            q = torch_.tensor_bhnd((2, 1, 8, 64), "bfloat16")
            kc = torch_.tensor_bhnd((4, 16, 2, 64), "bfloat16")
            vc = torch_.tensor_bhnd((4, 16, 2, 64), "bfloat16")
            table = torch_.tensor_bhnd((2, 2), "int32")
            with self.assertRaises(flashrtc.NoDeviceError):
                flashrtc.attention_with_kvcache(q, kc, vc, cache_seqlens=3, block_table=table, causal=True)


@unittest.skipUnless(torch is not None, "torch is not installed")
class Operators(unittest.TestCase):
    """The torch.library operators: the cache mutation in the schema (the append's operator only), the fake
    implementations' outputs
    (what torch.compile and CUDA-graph capture plan with), and the refusal of gradients."""

    @classmethod
    def setUpClass(cls):
        from flashrtc import _torch_ops
        cls.ops = _torch_ops

    def test_schema_declares_the_cache_writes(self):
        schema = torch.ops.flashrtc.attention_with_kvcache.default._schema
        written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        self.assertEqual(written, ["k_cache", "v_cache"])
        for read_only in (torch.ops.flashrtc.attention_over_kvcache, torch.ops.flashrtc.merge_states):
            arguments = read_only.default._schema.arguments
            self.assertFalse(any(a.alias_info is not None and a.alias_info.is_write for a in arguments))

    def test_fake_implementations(self):
        with FakeTensorMode():
            q = torch.empty((3, 2, 8, 64), dtype=torch.bfloat16, device="cuda")
            kc = torch.empty((5, 16, 2, 64), dtype=torch.bfloat16, device="cuda")
            seqlens = torch.empty((3,), dtype=torch.int32, device="cuda")
            table = torch.empty((3, 4), dtype=torch.int32, device="cuda")
            o, lse = torch.ops.flashrtc.attention_with_kvcache.default(q, kc, kc.clone(), None, None, seqlens,
                                                                       None, table, None, True, 0)
            self.assertEqual((tuple(o.shape), o.dtype, o.is_contiguous()), ((3, 2, 8, 64), torch.bfloat16, True))
            self.assertEqual((tuple(lse.shape), lse.dtype), ((3, 8, 2), torch.float32))
            o, lse = torch.ops.flashrtc.attention_over_kvcache.default(q, kc, kc.clone(), seqlens, None, table,
                                                                       0.5, False, 2)
            self.assertEqual((tuple(o.shape), tuple(lse.shape)), ((3, 2, 8, 64), (3, 8, 2)))
            o_a = torch.empty((2, 5, 4, 32), dtype=torch.float16, device="cuda")
            lse_a = torch.empty((2, 4, 5), dtype=torch.float32, device="cuda")
            o, lse = torch.ops.flashrtc.merge_states.default(o_a, lse_a, o_a, lse_a)
            self.assertEqual((tuple(o.shape), o.dtype, tuple(lse.shape)), ((2, 5, 4, 32), torch.float16, (2, 4, 5)))

    def test_gradients_are_refused(self):
        q = torch.zeros((1, 1, 2, 64), requires_grad=True)
        with self.assertRaises(flashrtc.UnsupportedError) as caught:
            flashrtc.attention_with_kvcache(q, torch.zeros((1, 16, 2, 64)), torch.zeros((1, 16, 2, 64)))
        self.assertIn("torch.no_grad()", str(caught.exception))
        o_a = torch.zeros((1, 1, 2, 64), requires_grad=True)
        lse = torch.zeros((1, 2, 1))
        with self.assertRaises(flashrtc.UnsupportedError):
            flashrtc.merge_states(o_a, lse, o_a, lse)


if __name__ == "__main__":
    unittest.main()

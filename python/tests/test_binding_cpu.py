"""The Python binding without torch and without a GPU: argument errors, the library search, and the
marshalling into the C struct, on fake tensors that expose __cuda_array_interface__ or DLPack with made-up
device pointers (never dereferenced: every call here stops at validation, or at NoDevice where no GPU is).

Usage: FLASHRTC_LIBRARY=<build>/runtime/libflashrtc.so python3 python/tests/test_binding_cpu.py
Without FLASHRTC_LIBRARY the tests that need the library are skipped. With FLASHRTC_TEST_INSTALLED=1 they
test the installed flashrtc package instead of this checkout's (tests/packaging/test_wheel.sh).
"""
import ctypes
import inspect
import itertools
import json
import os
import subprocess
import sys
import time
import unittest
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
INSTALLED = os.environ.get("FLASHRTC_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, str(PYTHON_DIR))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_torch  # noqa: E402
import flashrtc  # noqa: E402  (after the path, like an installed package)
from flashrtc import _arguments, _attention, _backward, _forward, _library, _signatures  # noqa: E402
assert not (INSTALLED and PYTHON_DIR in Path(flashrtc.__file__).resolve().parents), flashrtc.__file__
from flashrtc._tensors import DLTensor  # noqa: E402

LIBRARY = os.environ.get("FLASHRTC_LIBRARY")
_addresses = itertools.count(0x7F0000000000, 0x1000000)  # distinct, 16-byte aligned, never dereferenced


def gpu_present():
    """True when the CUDA driver loads and sees a device: then a valid call would really launch, so the
    tests that reach the device with fake pointers are skipped."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


class FakeCai:
    """A CUDA array by __cuda_array_interface__ v3; strides in bytes, None for C order."""

    def __init__(self, shape, typestr="<f2", strides=None, ptr=None, stream=None, readonly=False, mask=None):
        self.interface = {"shape": tuple(shape), "typestr": typestr, "strides": strides, "version": 3,
                          "data": (next(_addresses) if ptr is None else ptr, readonly), "mask": mask}
        if stream is not None:
            self.interface["stream"] = stream

    @property
    def __cuda_array_interface__(self):
        return self.interface


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_NAME = ctypes.c_char_p(b"dltensor")  # the capsule keeps this pointer: it must outlive it


class FakeDLPack:
    """A DLPack producer: a DLManagedTensor without a deleter, in a capsule without a destructor."""

    def __init__(self, shape, code=4, bits=16, device_type=2, device_id=0, strides=None, byte_offset=0):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        self.managed = _DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = next(_addresses)
        t.device.device_type, t.device.device_id = device_type, device_id
        t.ndim = len(shape)
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        if self.strides is not None:
            t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = byte_offset
        self.streams_seen = []

    def __dlpack__(self, stream=None):
        self.streams_seen.append(stream)
        return _capsule_new(ctypes.addressof(self.managed), _CAPSULE_NAME.value, None)

    def __dlpack_device__(self):
        return (self.managed.dl_tensor.device.device_type, self.managed.dl_tensor.device.device_id)


def qkvo(b=2, hq=4, hkv=2, nq=64, nk=128, d=64, typestr="<f2"):
    """q, k, v, out in [B, H, N, d] order, C-contiguous."""
    return (FakeCai((b, hq, nq, d), typestr), FakeCai((b, hkv, nk, d), typestr),
            FakeCai((b, hkv, nk, d), typestr), FakeCai((b, hq, nq, d), typestr))


def lse_for(b=2, hq=4, nq=64, typestr="<f4", strides=None):
    return FakeCai((b, hq, nq), typestr, strides)


def backward_args(b=2, hq=4, hkv=2, nq=64, nk=128, d=64, typestr="<f2"):
    """dout, q, k, v, o, lse of a forward in [B, H, N, d] order, and dq, dk, dv: keyword arguments of
    flashrtc.attention_backward."""
    q, k, v, o = qkvo(b, hq, hkv, nq, nk, d, typestr)
    return dict(dout=FakeCai((b, hq, nq, d), typestr), q=q, k=k, v=v, o=o, lse=lse_for(b, hq, nq),
                dq=FakeCai((b, hq, nq, d), typestr), dk=FakeCai((b, hkv, nk, d), typestr),
                dv=FakeCai((b, hkv, nk, d), typestr))


def call_backward(args, **options):
    args = dict(args, **options)
    tensors = [args.pop(name) for name in ("dout", "q", "k", "v", "o", "lse")]
    return flashrtc.attention_backward(*tensors, **args)


def run_python(code, **env):
    environment = dict(os.environ, **env)
    if not INSTALLED:
        environment["PYTHONPATH"] = str(PYTHON_DIR)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                          timeout=60)


class ImportAndLibrarySearch(unittest.TestCase):
    def test_import_needs_neither_torch_nor_the_library(self):
        r = run_python("import sys, flashrtc; assert 'torch' not in sys.modules; print(flashrtc.__version__)",
                       FLASHRTC_LIBRARY="/nonexistent/libflashrtc.so")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), flashrtc.__version__)

    def test_missing_library_fails_at_the_first_call_naming_where_it_looked(self):
        code = ("import flashrtc, sys\n"
                "sys.path.insert(0, %r)\n"
                "from test_binding_cpu import qkvo\n"
                "q, k, v, o = qkvo()\n"
                "try:\n"
                "    flashrtc.attention(q, k, v, out=o)\n"
                "except flashrtc.LibraryNotFoundError as e:\n"
                "    assert isinstance(e, OSError) and isinstance(e, flashrtc.FlashrtcError)\n"
                "    print(e)\n" % str(Path(__file__).parent))
        r = run_python(code, FLASHRTC_LIBRARY="/nonexistent/libflashrtc.so")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("/nonexistent/libflashrtc.so: no such file", r.stdout)
        self.assertIn("FLASHRTC_LIBRARY", r.stdout)

    def test_a_file_that_is_no_library_reports_the_loader_error(self):
        r = run_python("import flashrtc\ntry:\n    flashrtc.library_version()\n"
                       "except flashrtc.LibraryNotFoundError as e:\n    print(e)\n",
                       FLASHRTC_LIBRARY=__file__)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(__file__ + ":", r.stdout)
        self.assertNotIn("no such file", r.stdout)

    def test_search_order_without_the_variable(self):
        saved = os.environ.pop("FLASHRTC_LIBRARY", None)
        try:
            paths = _library.candidate_paths()
        finally:
            if saved is not None:
                os.environ["FLASHRTC_LIBRARY"] = saved
        package = Path(flashrtc.__file__).resolve().parent
        folders = [Path(p).parent for p in paths[:-1]]
        # A checkout's build folder is searched only from a checkout, never beside site-packages.
        build = [] if INSTALLED else [PYTHON_DIR.parent / "build" / "runtime"] * 2
        self.assertEqual(folders, [package, package, package.parent, package.parent] + build)
        self.assertEqual(paths[-1], "libflashrtc.so.0")  # the system loader comes last

    def test_the_variable_alone_is_tried_when_set(self):
        os.environ["FLASHRTC_LIBRARY"], saved = "/x/libflashrtc.so", os.environ.get("FLASHRTC_LIBRARY")
        try:
            self.assertEqual(_library.candidate_paths(), ["/x/libflashrtc.so"])
        finally:
            if saved is None:
                del os.environ["FLASHRTC_LIBRARY"]
            else:
                os.environ["FLASHRTC_LIBRARY"] = saved

    @unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
    def test_the_library_named_by_the_variable_loads(self):
        self.assertEqual(flashrtc.loaded_path(), LIBRARY)
        self.assertRegex(flashrtc.library_version(), r"^\d+\.\d+\.\d+$")


class StructLayout(unittest.TestCase):
    def test_matches_the_c_header(self):  # the same numbers as tests/cpu/test_c_api.cpp
        P = _library.ForwardParams
        self.assertEqual(ctypes.sizeof(_library.Tensor), 40)
        self.assertEqual(ctypes.sizeof(P), 264)
        offsets = {"struct_size": 0, "dtype": 4, "batch": 8, "head_dim": 48, "q": 56, "o": 176, "lse": 216,
                   "softmax_scale": 224, "has_softmax_scale": 228, "mask": 232, "block_m": 236, "stages": 248,
                   "stream": 256}
        self.assertEqual({name: getattr(P, name).offset for name in offsets}, offsets)

    def test_backward_matches_the_c_header(self):
        P = _library.BackwardParams
        self.assertEqual(ctypes.sizeof(P), 424)
        offsets = {"struct_size": 0, "dtype": 4, "batch": 8, "head_dim": 48, "q": 56, "o": 176, "d_o": 216,
                   "lse": 256, "d_q": 264, "d_k": 304, "d_v": 344, "softmax_scale": 384, "has_softmax_scale": 388,
                   "mask": 392, "deterministic": 396, "block_m": 400, "stages": 412, "stream": 416}
        self.assertEqual({name: getattr(P, name).offset for name in offsets}, offsets)

    @unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
    def test_the_library_fills_the_size_and_defaults(self):
        p = _library.load().new_params()
        self.assertEqual(p.struct_size, ctypes.sizeof(_library.ForwardParams))
        self.assertEqual((p.q.stride_dim, p.o.stride_dim, p.has_softmax_scale, p.softmax_scale), (1, 1, 0, 0.0))


class ArgumentErrors(unittest.TestCase):
    """Mistakes found in Python, before the library is needed."""

    def invalid(self, fragment, *args, **kwargs):
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            flashrtc.attention(*args, **kwargs)
        self.assertIn(fragment, str(caught.exception))
        self.assertIsInstance(caught.exception, ValueError)
        self.assertIsNone(caught.exception.status)

    def test_objects_that_are_not_tensors(self):
        q, k, v, o = qkvo()
        with self.assertRaisesRegex(TypeError, "q: expected a torch tensor"):
            flashrtc.attention([[1.0]], k, v, out=o)
        with self.assertRaisesRegex(TypeError, "v: expected"):
            flashrtc.attention(q, k, None, out=o)

    def test_dtypes(self):
        q, k, v, o = qkvo(typestr="<f8")
        self.invalid("q has dtype typestr '<f8'", q, k, v, out=o)
        q, k, v, o = qkvo()
        self.invalid("k has dtype float32, q has float16", q, FakeCai((2, 2, 128, 64), "<f4"), v, out=o)
        self.invalid("out has dtype float32", q, k, v, out=FakeCai((2, 4, 64, 64), "<f4"))
        self.invalid("DLPack dtype (code 0, bits 8", FakeDLPack((2, 4, 64, 64), code=0, bits=8), k, v, out=o)

    def test_shapes(self):
        q, k, v, o = qkvo()
        self.invalid("q has shape (4, 64, 64): expected 4 dims, [B, H, N, d]", FakeCai((4, 64, 64)), k, v, out=o)
        self.invalid("expected 4 dims, [B, N, H, d] (layout='bnhd')", FakeCai((4, 64, 64)), k, v, out=o,
                     layout="bnhd")
        self.invalid("k has shape (2, 2, 128, 64) and v (2, 2, 120, 64)", q, k, FakeCai((2, 2, 120, 64)), out=o)
        self.invalid("k has batch 3, q has 2", q, FakeCai((3, 2, 128, 64)), FakeCai((3, 2, 128, 64)), out=o)
        self.invalid("k has head dim 32, q has 64", q, FakeCai((2, 2, 128, 32)), FakeCai((2, 2, 128, 32)), out=o)
        self.invalid("out has shape (2, 4, 64, 32)", q, k, v, out=FakeCai((2, 4, 64, 32)))

    def test_devices(self):
        q, k, v, o = qkvo()
        self.invalid("q is a DLPack tensor on device type 1: flashrtc needs CUDA tensors",
                     FakeDLPack((2, 4, 64, 64), device_type=1), k, v, out=o)
        dq, dk, dv = (FakeDLPack(s, device_id=i) for s, i in
                      (((2, 4, 64, 64), 0), ((2, 2, 128, 64), 1), ((2, 2, 128, 64), 1)))
        self.invalid("k is on cuda:1, q on cuda:0", dq, dk, dv, out=FakeDLPack((2, 4, 64, 64)))

    def test_options(self):
        q, k, v, o = qkvo()
        self.invalid("layout='bshd'", q, k, v, out=o, layout="bshd")
        for causal in ("yes", 2, "causal", 1.0):
            self.invalid("causal=", q, k, v, out=o, causal=causal)
        self.invalid("give 4 values", q, k, v, out=o, config=(64, 64, 4))
        self.invalid("warps=0 must be a positive integer", q, k, v, out=o, config=(64, 64, 0, 1))
        self.invalid("give exactly block_m", q, k, v, out=o, config={"block_m": 64})
        with self.assertRaisesRegex(TypeError, "config"):
            flashrtc.attention(q, k, v, out=o, config="64,64,4,1")
        with self.assertRaisesRegex(TypeError, "scale"):
            flashrtc.attention(q, k, v, out=o, scale="0.5")
        with self.assertRaisesRegex(TypeError, "stream"):
            flashrtc.attention(q, k, v, out=o, stream="default")
        self.invalid("stream: out of range [0, 18446744073709551615]", q, k, v, out=o, stream=-1)

    def test_sdpa_keywords(self):
        q, k, v, o = qkvo(hq=4, hkv=2)
        self.invalid("causal=True and is_causal=True: give one of them", q, k, v, out=o, causal=True, is_causal=True)
        self.invalid("causal=False and is_causal=True", q, k, v, out=o, causal=False, is_causal=True)
        self.invalid("is_causal='bottom-right': must be True or False", q, k, v, out=o, is_causal="bottom-right")
        self.invalid("enable_gqa=False with 4 query heads and 2 key/value heads", q, k, v, out=o, enable_gqa=False)
        self.invalid("enable_gqa='yes': must be True, False or None", q, k, v, out=o, enable_gqa="yes")
        self.invalid("deterministic=1: must be True, False or None", q, k, v, out=o, deterministic=1)
        self.invalid("is_causal=1: must be True or False", q, k, v, out=o, is_causal=1)

    def test_what_sdpa_takes_and_flashrtc_does_not_yet_is_refused_not_ignored(self):
        q, k, v, o = qkvo()
        mask = FakeCai((64, 128), "<f2")
        self.invalid("attn_mask: flashrtc does not take a mask tensor yet", q, k, v, mask, out=o)
        self.invalid("attn_mask: flashrtc does not take a mask tensor yet", q, k, v, attn_mask=mask, out=o)
        for p in (0.1, 1, float("nan"), -0.5):
            self.invalid(f"dropout_p={p!r}: flashrtc has no attention dropout yet", q, k, v, None, p, out=o)
        for p in ("0", None, True, [0.0]):
            self.invalid(f"dropout_p={p!r}: expected a number", q, k, v, dropout_p=p, out=o)

    def test_sdpa_order_positional_and_keyword(self):
        """SDPA's parameters, in SDPA's order (torch.nn.functional.scaled_dot_product_attention(query, key,
        value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)); flashrtc's own
        after them, keyword only. enable_gqa's default None also serves Hq != Hkv, which SDPA's False refuses."""
        parameters = list(inspect.signature(flashrtc.attention).parameters.values())
        positional = [(p.name, p.default) for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        self.assertEqual(positional, [("q", inspect.Parameter.empty), ("k", inspect.Parameter.empty),
                                      ("v", inspect.Parameter.empty), ("attn_mask", None), ("dropout_p", 0.0),
                                      ("is_causal", False), ("scale", None), ("enable_gqa", None)])
        self.assertTrue(all(p.kind is p.KEYWORD_ONLY for p in parameters[len(positional):]))
        self.assertEqual([p.name for p in parameters[len(positional):]],
                         ["causal", "return_lse", "layout", "config", "out", "lse_out", "stream", "deterministic"])

    def test_a_non_torch_tensor_that_requires_grad(self):
        q, k, v, o = qkvo()
        k.requires_grad = True
        self.invalid("k is a __main__.FakeCai that requires grad: flashrtc computes gradients through PyTorch's "
                     "autograd only", q, k, v, out=o)

    def test_outputs_of_non_torch_inputs_must_be_given(self):
        q, k, v, o = qkvo()
        self.invalid("pass out=", q, k, v)
        self.invalid("pass lse_out=", q, k, v, out=o, return_lse=True)
        self.invalid("out is read-only", q, k, v, out=FakeCai((2, 4, 64, 64), readonly=True))

    def test_lse_out(self):
        q, k, v, o = qkvo()
        self.invalid("lse_out has dtype float16", q, k, v, out=o, lse_out=lse_for(typestr="<f2"))
        self.invalid("lse_out has shape (2, 4, 65)", q, k, v, out=o, lse_out=FakeCai((2, 4, 65), "<f4"))
        self.invalid("lse_out has strides (512, 64, 1): it must be contiguous", q, k, v, out=o,
                     lse_out=lse_for(strides=(2048, 256, 4)))

    def test_interface_details(self):
        q, k, v, o = qkvo()
        self.invalid("not multiples of the element size 2", FakeCai((2, 4, 64, 64), strides=(32768, 8192, 128, 3)),
                     k, v, out=o)
        self.invalid("masked arrays", FakeCai((2, 4, 64, 64), mask=object()), k, v, out=o)


class BackwardArgumentErrors(unittest.TestCase):
    """attention_backward's mistakes found in Python: each names the tensor, before the library is needed
    (so before anything could be launched or a gradient written)."""

    def invalid(self, fragment, **changes):
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            call_backward(backward_args(), **changes)
        self.assertIn(fragment, str(caught.exception))
        self.assertIsNone(caught.exception.status)

    def test_a_forward_without_lse(self):
        self.invalid("lse is None: the backward needs the forward's log-sum-exp", lse=None)

    def test_shapes(self):
        self.invalid("dout has shape (2, 4, 64, 32), q has (2, 4, 64, 64)", dout=FakeCai((2, 4, 64, 32)))
        self.invalid("o has shape (2, 4, 63, 64), q has (2, 4, 64, 64)", o=FakeCai((2, 4, 63, 64)))
        self.invalid("dout has shape (2, 4, 64): expected 4 dims", dout=FakeCai((2, 4, 64)))
        self.invalid("k has shape (2, 2, 128, 64) and v (2, 2, 100, 64)", v=FakeCai((2, 2, 100, 64)))
        self.invalid("lse has shape (2, 4, 65): it must be [B, Hq, Nq] = [2, 4, 64]", lse=lse_for(nq=65))
        self.invalid("dq has shape (2, 4, 64, 32), q has (2, 4, 64, 64)", dq=FakeCai((2, 4, 64, 32)))
        self.invalid("dk has shape (2, 4, 128, 64), k has (2, 2, 128, 64)", dk=FakeCai((2, 4, 128, 64)))

    def test_dtypes(self):
        self.invalid("dout has dtype float32, q has float16", dout=FakeCai((2, 4, 64, 64), "<f4"))
        self.invalid("o has dtype float32, q has float16", o=FakeCai((2, 4, 64, 64), "<f4"))
        self.invalid("lse has dtype float16: it must be float32", lse=lse_for(typestr="<f2"))
        self.invalid("dv has dtype float32, v has float16", dv=FakeCai((2, 2, 128, 64), "<f4"))

    def test_strides_and_read_only_outputs(self):
        self.invalid("lse has strides (512, 64, 1): it must be contiguous", lse=lse_for(strides=(2048, 256, 4)))
        self.invalid("not multiples of the element size 2", dout=FakeCai((2, 4, 64, 64), strides=(32768, 8192, 128, 3)))
        self.invalid("dq is read-only", dq=FakeCai((2, 4, 64, 64), readonly=True))

    def test_devices(self):
        args = backward_args()
        for name in ("dout", "o", "lse", "dq"):
            shape = args[name].interface["shape"]
            typestr = args[name].interface["typestr"]
            devices = {n: FakeDLPack(args[n].interface["shape"], code=2, bits=int(args[n].interface["typestr"][2:]) * 8)
                       for n in args}
            devices[name] = FakeDLPack(shape, code=2, bits=int(typestr[2:]) * 8, device_id=1)
            with self.subTest(tensor=name), self.assertRaises(flashrtc.InvalidArgumentError) as caught:
                call_backward(devices)
            self.assertIn(f"{name} is on cuda:1, q on cuda:0", str(caught.exception))

    def test_outputs_of_non_torch_inputs_must_be_given(self):
        self.invalid("pass dq=, dk= and dv=", dq=None)

    def test_options(self):
        self.invalid("causal='yes'", causal="yes")
        self.invalid("layout='bshd'", layout="bshd")
        self.invalid("deterministic=1: must be True, False or None", deterministic=1)
        self.invalid("warps=0 must be a positive integer", config=(64, 64, 0, 1))
        self.invalid("causal=True and is_causal=True: give one of them", causal=True, is_causal=True)
        self.invalid("is_causal='bottom-right': must be True or False", is_causal="bottom-right")
        self.invalid("enable_gqa=False with 4 query heads and 2 key/value heads", enable_gqa=False)
        self.invalid("enable_gqa=1: must be True, False or None", enable_gqa=1)


class ForeignBounds(unittest.TestCase):
    """What a producer or caller reports is range-checked before it is read or stored in a C field: ctypes
    would truncate silently (2^64 + 1 to 1, -16 to 2^64 - 16)."""

    def invalid(self, fragments, *args, **kwargs):
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            flashrtc.attention(*args, **kwargs)
        for fragment in fragments:
            self.assertIn(fragment, str(caught.exception))

    def test_a_huge_dlpack_ndim_is_refused_before_its_shape_is_read(self):
        q, k, v, o = qkvo()
        liar = FakeDLPack((2, 4, 64, 64))
        liar.managed.dl_tensor.ndim = 100000  # its shape array has 4 entries
        started = time.monotonic()
        self.invalid(["q: DLPack ndim=100000: flashrtc reads tensors of at most 4 dims"], liar, k, v, out=o)
        self.assertLess(time.monotonic() - started, 1.0)
        liar.managed.dl_tensor.ndim = -1
        self.invalid(["q: DLPack ndim=-1: a count of dims cannot be negative"], liar, k, v, out=o)

    def test_dlpack_negative_extents_and_null_shapes(self):
        q, k, v, o = qkvo()
        self.invalid(["k.shape[2]=-5: out of range [0, 9223372036854775807]"], q,
                     FakeDLPack((2, 2, -5, 64)), v, out=o)
        null_shape = FakeDLPack((2, 4, 64, 64))
        null_shape.managed.dl_tensor.shape = None
        self.invalid(["q: DLPack ndim=4 with a null shape array"], null_shape, k, v, out=o)

    def test_shapes_beyond_int64(self):
        q, k, v, o = qkvo()
        self.invalid(["q.shape[2]=18446744073709551617: out of range [0, 9223372036854775807]"],
                     FakeCai((2, 4, 2 ** 64 + 1, 64)), k, v, out=o)
        self.invalid(["v.shape[0]=-1"], q, k, FakeCai((-1, 2, 128, 64)), out=o)
        self.invalid(["q.shape[1]=4.0: expected an integer"], FakeCai((2, 4.0, 64, 64)), k, v, out=o)
        no_shape = FakeCai((2, 4, 64, 64))
        no_shape.interface["shape"] = None
        self.invalid(["q.shape=None: expected a sequence of integers"], no_shape, k, v, out=o)

    def test_pointers_outside_the_address_range(self):
        q, k, v, o = qkvo()
        self.invalid(["q.data: out of range [0, 18446744073709551615]"], FakeCai((2, 4, 64, 64), ptr=-16),
                     k, v, out=o)
        self.invalid(["out.data: out of range"], q, k, v, out=FakeCai((2, 4, 64, 64), ptr=2 ** 64))
        self.invalid(["q.data (of type float): expected an integer"], FakeCai((2, 4, 64, 64), ptr=1.5 * 2 ** 40),
                     k, v, out=o)
        unaligned = FakeDLPack((2, 4, 64, 64), byte_offset=2 ** 64 - 1)
        self.invalid(["q.data + byte_offset: out of range"], unaligned, k, v, out=o)

    def test_streams_outside_the_handle_range(self):
        q, k, v, o = qkvo()
        self.invalid(["stream: out of range [0, 18446744073709551615]"], q, k, v, out=o, stream=2 ** 70)

        class HugeTorchLikeStream:
            cuda_stream = 2 ** 70

        self.invalid(["stream.cuda_stream: out of range"], q, k, v, out=o, stream=HugeTorchLikeStream())
        named = FakeCai((2, 4, 64, 64), stream=2 ** 70)
        self.invalid(["q.__cuda_array_interface__['stream']: out of range"], named, k, v, out=o)

    def test_strides_of_the_wrong_length_or_range(self):
        q, k, v, o = qkvo()
        self.invalid(["q.strides has 3 entries for 4 dims"], FakeCai((2, 4, 64, 64), strides=(32768, 8192, 128)),
                     k, v, out=o)
        self.invalid(["k.strides[0]=9223372036854775808: out of range"], q,
                     FakeCai((2, 2, 128, 64), strides=(2 ** 63, 128, 16384, 2)), v, out=o)
        self.invalid(["v.strides=5: expected a sequence"], q, k, FakeCai((2, 2, 128, 64), strides=5), out=o)

    def test_malformed_interfaces(self):
        q, k, v, o = qkvo()
        broken = FakeCai((2, 4, 64, 64))
        broken.interface["data"] = 0x7F0000000000
        self.invalid(["q: __cuda_array_interface__ data is of type int: expected (pointer, read-only flag)"],
                     broken, k, v, out=o)
        broken = FakeCai((2, 4, 64, 64))
        broken.interface["typestr"] = None
        self.invalid(["typestr=None"], broken, k, v, out=o)

    def test_scales_beyond_float32(self):
        q, k, v, o = qkvo()
        for scale in (1e39, -1e300, 2 ** 2000):
            self.invalid(["out of float32's range"], q, k, v, out=o, scale=scale)


class Pulled:
    """A sequence that never ends, counting what is read of it; past 1000 entries it fails the test instead of
    filling memory (a plain endless iterator would hang there)."""

    def __init__(self, value=64):
        self.value, self.count = value, 0

    def __iter__(self):
        while True:
            self.count += 1
            if self.count > 1000:
                raise AssertionError("read more than 1000 entries of an endless sequence")
            yield self.value


ADDRESS_LIKE = 0x7F00DEADBEE0  # what a stray read past an array or a pointer would put in a message


class HostileProducers(unittest.TestCase):
    """A producer can lie: its shape and strides are read a bounded number of entries deep, a DLPack ndim is
    checked before the arrays it sizes are read, and no message shows a pointer, an address or an unbounded
    repr."""

    def refused(self, fragment, *args, **kwargs):
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            flashrtc.attention(*args, **kwargs)
        message = str(caught.exception)
        self.assertIn(fragment, message)
        self.assert_no_address(message)
        return message

    def assert_no_address(self, message):
        self.assertNotRegex(message, r"0x[0-9a-fA-F]{6,}")
        self.assertNotIn(str(ADDRESS_LIKE), message)

    def test_an_endless_shape_or_strides_is_refused_after_max_rank_plus_one_entries(self):
        q, k, v, o = qkvo()
        for field in ("shape", "strides"):
            with self.subTest(field=field):
                endless = Pulled()
                liar = FakeCai((2, 4, 64, 64))
                liar.interface[field] = endless
                self.refused(f"q.{field} has more than 4 entries: flashrtc reads tensors of at most 4 dims",
                             liar, k, v, out=o)
                self.assertEqual(endless.count, 5)

    def test_a_long_shape_is_not_read_to_its_end(self):
        q, k, v, o = qkvo()
        long_shape = FakeCai((2, 4, 64, 64))
        long_shape.interface["shape"] = range(1, 10 ** 18)
        started = time.monotonic()
        self.refused("q.shape has more than 4 entries", long_shape, k, v, out=o)
        self.assertLess(time.monotonic() - started, 1.0)
        self.refused("out.shape has more than 4 entries", q, k, v, out=FakeCai((1, 2, 4, 64, 64)))

    def test_a_dlpack_ndim_beyond_its_shape_array_is_refused_before_reading_it(self):
        q, k, v, o = qkvo()
        for ndim in (5, 64):
            with self.subTest(ndim=ndim):
                liar = FakeDLPack((2, 4, 64, 64))
                # What lies past the 4 entries the producer has: here an address-like sentinel, in a real
                # producer whatever the heap holds there.
                beyond = (ctypes.c_int64 * 64)(2, 4, 64, 64, *([ADDRESS_LIKE] * 60))
                liar.beyond = beyond
                liar.managed.dl_tensor.shape = ctypes.cast(beyond, ctypes.POINTER(ctypes.c_int64))
                liar.managed.dl_tensor.ndim = ndim
                self.refused(f"q: DLPack ndim={ndim}: flashrtc reads tensors of at most 4 dims", liar, k, v, out=o)

    def test_messages_name_a_foreign_value_by_its_type_not_its_repr(self):
        q, k, v, o = qkvo()
        opaque = FakeCai((2, 4, 64, 64))
        opaque.interface["shape"] = object()  # its repr holds its address
        self.assertIn("q.shape=<object object>: expected a sequence of integers",
                      self.refused("q.shape=", opaque, k, v, out=o))
        opaque = FakeCai((2, 4, 64, 64))
        opaque.interface["shape"] = (2, object(), 64, 64)
        self.refused("q.shape[1]=<object object>: expected an integer", opaque, k, v, out=o)
        opaque = FakeCai((2, 4, 64, 64))
        opaque.interface["strides"] = object()
        self.refused("q.strides=<object object>: expected a sequence of integers", opaque, k, v, out=o)
        opaque = FakeCai((2, 4, 64, 64))
        opaque.interface["typestr"] = "<f" + "9" * 100000
        message = self.refused("q has dtype typestr '<f99999", opaque, k, v, out=o)
        self.assertIn("... (100002 characters)", message)
        self.assertLess(len(message), 300)

    def test_a_malformed_dlpack_device_is_refused(self):
        q, k, v, o = qkvo()
        for answer, shown in ((itertools.count(), "<itertools.count object>"), ((2, 0, 0), "(2, 0, 0)"),
                              ((object(), 0), None)):
            liar = FakeDLPack((2, 4, 64, 64))
            liar.__dlpack_device__ = lambda answer=answer: answer
            with self.subTest(answer=shown):
                self.refused(f"q.__dlpack_device__() returned {shown}: expected (device_type, device_id)" if shown
                             else "q.__dlpack_device__()[0]=<object object>: expected an integer", liar, k, v, out=o)

    def test_a_zero_item_size_is_a_dtype_error(self):
        q, k, v, o = qkvo()
        self.refused("q has dtype typestr '<f0'", FakeCai((2, 4, 64, 64), "<f0", strides=(8, 4, 2, 1)), k, v, out=o)

    def test_integers_too_long_to_print_are_named_by_size(self):
        q, k, v, o = qkvo()
        self.refused("q.shape[2]=<an integer of 20001 bits>: out of range", FakeCai((2, 4, 2 ** 20000, 64)), k, v,
                     out=o)

    def test_pointers_and_handles_never_appear_in_a_message(self):
        q, k, v, o = qkvo()
        bare_pointer = FakeCai((2, 4, 64, 64))
        bare_pointer.interface["data"] = ADDRESS_LIKE
        self.refused("q: __cuda_array_interface__ data is of type int", bare_pointer, k, v, out=o)
        three = FakeCai((2, 4, 64, 64))
        three.interface["data"] = (ADDRESS_LIKE, False, 0)
        self.refused("data is a tuple of 3 items", three, k, v, out=o)
        self.refused("q.data: out of range", FakeCai((2, 4, 64, 64), ptr=-ADDRESS_LIKE), k, v, out=o)

        class ThreeFieldStream:
            def __cuda_stream__(self):
                return (0, ADDRESS_LIKE, 0)

        with self.assertRaises(TypeError) as caught:
            flashrtc.attention(q, k, v, out=o, stream=ThreeFieldStream())
        self.assertIn("returned a tuple of 3 items: expected (version, handle)", str(caught.exception))
        self.assert_no_address(str(caught.exception))

    def test_row_major_strides_beyond_int64_are_refused(self):
        q, k, v, o = qkvo()
        self.refused("q has shape (2147483648, 2147483648, 2147483648, 64): its C-order strides exceed 2^63 - 1",
                     FakeCai((2 ** 31, 2 ** 31, 2 ** 31, 64)), k, v, out=o)
        self.refused("k has shape (2147483648, 2147483648, 2147483648, 64): its C-order strides exceed",
                     q, FakeDLPack((2 ** 31, 2 ** 31, 2 ** 31, 64)), v, out=o)


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class Marshalling(unittest.TestCase):
    """What reaches the C struct (prepare() stops short of the launch)."""

    def test_bhnd_contiguous(self):
        q, k, v, o = qkvo(b=2, hq=4, hkv=2, nq=64, nk=128, d=64)
        p = _forward.prepare(q, k, v, out=o).params
        self.assertEqual((p.dtype, p.batch, p.seqlen_q, p.seqlen_kv, p.heads_q, p.heads_kv, p.head_dim),
                         (1, 2, 64, 128, 4, 2, 64))
        self.assertEqual(p.q.data, q.interface["data"][0])
        self.assertEqual(p.o.data, o.interface["data"][0])
        strides = lambda t: (t.stride_batch, t.stride_seq, t.stride_head, t.stride_dim)  # noqa: E731
        self.assertEqual(strides(p.q), (4 * 64 * 64, 64, 64 * 64, 1))
        self.assertEqual(strides(p.k), (2 * 128 * 64, 64, 128 * 64, 1))
        self.assertEqual(strides(p.o), strides(p.q))
        self.assertIsNone(p.lse)
        self.assertEqual((p.mask, p.block_m, p.block_n, p.warps, p.stages), (0, 0, 0, 0, 0))

    def test_bnhd_and_a_transposed_view_of_it_give_the_same_strides(self):
        b, n, h, d = 2, 64, 4, 128
        bnhd = FakeCai((b, n, h, d), "<f4")
        p1 = _forward.prepare(bnhd, bnhd, bnhd, out=bnhd, layout="bnhd").params
        # [B, N, H, d] memory seen as [B, H, N, d] (x.transpose(1, 2) in torch): byte strides permuted.
        view = FakeCai((b, h, n, d), "<f4", strides=(n * h * d * 4, d * 4, h * d * 4, 4))
        p2 = _forward.prepare(view, view, view, out=view).params
        for p in (p1, p2):
            self.assertEqual((p.dtype, p.seqlen_q, p.heads_q), (0, n, h))
            self.assertEqual((p.q.stride_batch, p.q.stride_seq, p.q.stride_head, p.q.stride_dim),
                             (n * h * d, h * d, d, 1))

    def test_extent_one_dimensions_get_stride_zero(self):
        q = FakeCai((1, 1, 1, 64), strides=(2, 2, 2, 2))  # strides of extent-1 dims are meaningless
        p = _forward.prepare(q, q, q, out=q).params
        self.assertEqual((p.q.stride_batch, p.q.stride_seq, p.q.stride_head, p.q.stride_dim), (0, 0, 0, 1))

    def test_masks_tiles_scales_lse(self):
        q, k, v, o = qkvo()
        for causal, mask in ((False, 0), (True, 1), ("top-left", 1), ("bottom-right", 2), (0, 0), (1, 1)):
            self.assertEqual(_forward.prepare(q, k, v, out=o, causal=causal).params.mask, mask)
        for config in ((128, 64, 8, 2), {"block_m": 128, "block_n": 64, "warps": 8, "stages": 2}):
            p = _forward.prepare(q, k, v, out=o, config=config).params
            self.assertEqual((p.block_m, p.block_n, p.warps, p.stages), (128, 64, 8, 2))
        p = _forward.prepare(q, k, v, out=o).params
        self.assertEqual((p.has_softmax_scale, p.softmax_scale), (0, 0.0))  # the default, 1/sqrt(d)
        for scale in (-0.5, 0, 0.0, 3):
            p = _forward.prepare(q, k, v, out=o, scale=scale).params
            self.assertEqual((p.has_softmax_scale, p.softmax_scale), (1, scale))
        lse = lse_for()
        call = _forward.prepare(q, k, v, out=o, lse_out=lse)
        self.assertEqual(call.params.lse, lse.interface["data"][0])
        self.assertIs(call.lse, lse)
        self.assertIs(call.out, o)

    def test_streams(self):
        q, k, v, o = qkvo()
        self.assertIsNone(_forward.prepare(q, k, v, out=o).params.stream)  # legacy default

        class TorchLikeStream:
            cuda_stream = 0xABC0

        self.assertEqual(_forward.prepare(q, k, v, out=o, stream=0x1230).params.stream, 0x1230)
        self.assertEqual(_forward.prepare(q, k, v, out=o, stream=TorchLikeStream()).params.stream, 0xABC0)
        named = FakeCai((2, 4, 64, 64), stream=0x5550)  # the producer's stream, from the interface
        self.assertEqual(_forward.prepare(named, k, v, out=o).params.stream, 0x5550)

        class ProtocolStream:  # the CUDA stream protocol
            def __cuda_stream__(self):
                return (0, 0x6660)

        self.assertEqual(_forward.prepare(q, k, v, out=o, stream=ProtocolStream()).params.stream, 0x6660)
        with fake_torch.installed() as torch:  # a plain torch.Stream: its handle through torch.cuda.Stream
            self.assertEqual(_forward.prepare(q, k, v, out=o, stream=torch.Stream(7)).params.stream, 0x5007)

    def test_dlpack(self):
        shape_q, shape_kv = (2, 4, 64, 64), (2, 2, 128, 64)
        q = FakeDLPack(shape_q, byte_offset=256)
        k, v, o = FakeDLPack(shape_kv), FakeDLPack(shape_kv), FakeDLPack(shape_q)
        p = _forward.prepare(q, k, v, out=o).params
        self.assertEqual(p.dtype, 2)  # bfloat16
        self.assertEqual(p.q.data, q.managed.dl_tensor.data + 256)
        self.assertEqual((p.q.stride_batch, p.q.stride_seq, p.q.stride_head), (4 * 64 * 64, 64, 64 * 64))
        self.assertEqual(q.streams_seen, [1])  # DLPack's legacy default stream
        _forward.prepare(q, k, v, out=o, stream=0x7770)
        self.assertEqual(q.streams_seen[-1], 0x7770)
        strided = FakeDLPack(shape_q, strides=(64 * 4 * 64, 64, 4 * 64, 1))  # [B, N, H, d] memory as [B, H, N, d]
        p = _forward.prepare(strided, k, v, out=o).params
        self.assertEqual((p.q.stride_batch, p.q.stride_seq, p.q.stride_head), (64 * 4 * 64, 4 * 64, 64))


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class BackwardMarshalling(unittest.TestCase):
    """What reaches the backward's C struct; a library built before the backward refuses it clearly."""

    def setUp(self):
        self.has_backward = _library.load().backward is not None

    def test_a_library_without_the_backward_says_so(self):
        if self.has_backward:
            self.skipTest("this libflashrtc has the backward")
        with self.assertRaises(flashrtc.UnsupportedError) as caught:
            call_backward(backward_args())
        self.assertIn("has no backward pass (flashrtc_attention_backward is missing)", str(caught.exception))
        self.assertIn(LIBRARY, str(caught.exception))
        flashrtc.library_version()  # the forward's entry points still serve

    def test_fields(self):
        if not self.has_backward:
            self.skipTest("this libflashrtc predates the backward")
        args = backward_args(b=2, hq=4, hkv=2, nq=64, nk=128, d=64)
        dout, q, k, v, o, lse = (args.pop(name) for name in ("dout", "q", "k", "v", "o", "lse"))
        call = _backward.prepare_backward(dout, q, k, v, o, lse, causal="bottom-right", scale=-0.5,
                                          deterministic=True, config=(64, 32, 4, 1), stream=0x1230, **args)
        p = call.params
        self.assertEqual(p.struct_size, ctypes.sizeof(_library.BackwardParams))
        self.assertEqual((p.dtype, p.batch, p.seqlen_q, p.seqlen_kv, p.heads_q, p.heads_kv, p.head_dim),
                         (1, 2, 64, 128, 4, 2, 64))
        ptr = lambda x: x.interface["data"][0]  # noqa: E731
        self.assertEqual((p.q.data, p.k.data, p.v.data, p.o.data, p.d_o.data, p.lse),
                         (ptr(q), ptr(k), ptr(v), ptr(o), ptr(dout), ptr(lse)))
        self.assertEqual((p.d_q.data, p.d_k.data, p.d_v.data), (ptr(args["dq"]), ptr(args["dk"]), ptr(args["dv"])))
        strides = lambda t: (t.stride_batch, t.stride_seq, t.stride_head, t.stride_dim)  # noqa: E731
        self.assertEqual(strides(p.d_o), (4 * 64 * 64, 64, 64 * 64, 1))
        self.assertEqual(strides(p.d_k), (2 * 128 * 64, 64, 128 * 64, 1))
        self.assertEqual((p.mask, p.has_softmax_scale, p.softmax_scale, p.deterministic), (2, 1, -0.5, 1))
        self.assertEqual((p.block_m, p.block_n, p.warps, p.stages, p.stream), (64, 32, 4, 1, 0x1230))
        self.assertEqual(call.gradients, (args["dq"], args["dk"], args["dv"]))
        p = _backward.prepare_backward(dout, q, k, v, o, lse, **args).params
        self.assertEqual((p.mask, p.has_softmax_scale, p.deterministic, p.block_m, p.stream), (0, 0, 0, 0, None))

    def test_sdpa_keywords_and_deterministic_as_the_forward_takes_them(self):
        if not self.has_backward:
            self.skipTest("this libflashrtc predates the backward")
        library = _library.load()
        structs = []
        saved = library.backward
        library.backward = lambda p: structs.append(_library.BackwardParams.from_buffer_copy(p)) or 0
        try:
            for options, mask in (({"is_causal": True}, 1), ({"causal": "bottom-right"}, 2),
                                  ({"causal": True, "is_causal": False}, 1), ({"is_causal": None}, 0), ({}, 0)):
                call_backward(backward_args(), **options)
                self.assertEqual(structs[-1].mask, mask, options)
            call_backward(backward_args(hq=4, hkv=4), enable_gqa=False)
            call_backward(backward_args(), enable_gqa=True)
            for deterministic, torch_setting, expected in ((None, None, 0), (None, False, 0), (None, True, 1),
                                                           (False, True, 0), (True, False, 1)):
                with fake_torch.installed() as torch:
                    if torch_setting is not None:
                        torch.are_deterministic_algorithms_enabled = lambda: torch_setting
                    call_backward(backward_args(), deterministic=deterministic)
                self.assertEqual(structs[-1].deterministic, expected, (deterministic, torch_setting))
        finally:
            library.backward = saved

    @unittest.skipIf(gpu_present(), "a GPU is present: a valid call would launch on fake pointers")
    def test_a_valid_call_reaches_the_device_check(self):
        if not self.has_backward:
            self.skipTest("this libflashrtc predates the backward")
        with self.assertRaises(flashrtc.NoDeviceError):
            call_backward(backward_args(), causal=True)


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class TorchSignatureCache(unittest.TestCase):
    """Repeated torch calls (fake_torch.py) reuse their signature's struct: what reaches the C function must
    be what a fresh prepare() builds, with this call's pointers and stream, and nothing a changed signature
    or option needs may be skipped."""

    def setUp(self):
        self.library = _library.load()
        self.structs = []  # (bytes of the struct, torch's current device during the call)
        self.status = 0  # what the recorded "C call" returns

        def recorder(p):
            self.structs.append((bytes(p), self.torch.state["device"]))
            return self.status

        self.installed = fake_torch.installed()
        self.torch = self.installed.__enter__()
        self.library.forward = recorder
        self.signatures = _signatures.forward_signatures

        self.operator_calls = []  # what would have gone to the torch.library operator (needs real torch)

        def through_operator(*args, traced):
            self.operator_calls.append(args + (traced,))
            return "operator"

        self.saved_through_operator = _attention._through_operator
        _attention._through_operator = through_operator

    def tearDown(self):
        _attention._through_operator = self.saved_through_operator
        del self.library.forward  # the instance attribute shadowed the class's; back to the C function
        self.installed.__exit__(None, None, None)

    def last(self):
        return _library.ForwardParams.from_buffer_copy(self.structs[-1][0])

    def expected(self, *args, **kwargs):
        """The struct prepare() builds for this call, with the outputs' pointers of the last launch."""
        return bytes(_forward.prepare(*args, **kwargs).params)

    def same_but_pointers(self, got, want):
        got, want = _library.ForwardParams.from_buffer_copy(got), _library.ForwardParams.from_buffer_copy(want)
        for p in (got, want):
            p.q.data = p.k.data = p.v.data = p.o.data = p.lse = p.stream = None
        self.assertEqual(bytes(got), bytes(want))

    def test_a_repeated_call_fills_in_only_pointers_and_stream(self):
        torch = self.torch
        q, k, v = (torch.tensor_bhnd((1, 2, 5, 64)) for _ in range(3))
        o1 = flashrtc.attention(q, k, v)
        first = self.structs[-1][0]
        self.assertEqual(len(self.signatures), 1)
        torch.state["streams"][0] = 0xABC0
        q2, k2, v2 = (torch.tensor_bhnd((1, 2, 5, 64)) for _ in range(3))
        o2, lse = flashrtc.attention(q2, k2, v2, return_lse=True)
        o3, lse3 = flashrtc.attention(q2, k2, v2, return_lse=True)
        self.assertEqual(len(self.signatures), 2)  # return_lse is part of the signature
        p = self.last()
        self.assertEqual((p.q.data, p.k.data, p.v.data), (q2.data_ptr(), k2.data_ptr(), v2.data_ptr()))
        self.assertEqual((p.o.data, p.lse, p.stream), (o3.data_ptr(), lse3.data_ptr(), 0xABC0))
        self.assertEqual((lse3.shape, lse3.dtype.name, o3.stride()), ((1, 2, 5), "float32", q2.stride()))
        self.assertNotEqual(o2.data_ptr(), o3.data_ptr())  # fresh outputs per call
        self.same_but_pointers(first, self.expected(q, k, v, out=o1))
        self.same_but_pointers(bytes(p), self.expected(q2, k2, v2, lse_out=lse3, return_lse=True))

    def test_a_changed_signature_or_option_gets_its_own_struct(self):
        torch = self.torch
        base = dict(shape=(1, 2, 5, 64), dtype_name="bfloat16", strides=None)
        variants = [dict(), dict(shape=(1, 2, 6, 64)), dict(dtype_name="float16"),
                    dict(strides=(640 * 2, 64, 640, 1))]  # [B, N, H, d] memory seen as [B, H, N, d]
        options = [dict(), dict(causal=True), dict(causal="bottom-right"), dict(scale=0.5), dict(scale=-2),
                   dict(layout="bnhd")]
        for variant in variants:
            for option in options:
                spec = dict(base, **variant)
                q, k, v = (torch.tensor_bhnd(spec["shape"], spec["dtype_name"], strides=spec["strides"])
                           for _ in range(3))
                for _ in range(2):  # the second call comes from the cache
                    o = flashrtc.attention(q, k, v, **option)
                    with self.subTest(variant=variant, option=option):
                        self.same_but_pointers(self.structs[-1][0], self.expected(q, k, v, out=o, **option))
        self.assertEqual(len(self.signatures), len(variants) * len(options))

    def test_a_given_out_is_part_of_the_signature(self):
        torch = self.torch
        q, k, v = (torch.tensor_bhnd((1, 2, 5, 64)) for _ in range(3))
        outs = [torch.tensor_bhnd((1, 2, 5, 64)), torch.tensor_bhnd((1, 2, 5, 64)),
                torch.tensor_bhnd((1, 2, 5, 64), strides=(640 * 2, 64, 640, 1)),  # another layout
                torch.tensor_bhnd((1, 2, 5, 64), "float16")]  # wrong dtype: refused each time
        for out in outs[:3]:
            for _ in range(2):
                self.assertIs(flashrtc.attention(q, k, v, out=out), out)
                self.assertEqual(self.last().o.data, out.data_ptr())
                self.same_but_pointers(self.structs[-1][0], self.expected(q, k, v, out=out))
        self.assertEqual(len(self.signatures), 2)
        for _ in range(2):
            with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "out has dtype float16"):
                flashrtc.attention(q, k, v, out=outs[3])

    def test_cached_signatures_do_not_skip_checks(self):
        torch = self.torch
        q, k, v = (torch.tensor_bhnd((1, 2, 5, 64)) for _ in range(3))
        flashrtc.attention(q, k, v, scale=1, causal=True)
        with self.assertRaisesRegex(TypeError, "scale"):
            flashrtc.attention(q, k, v, scale=True, causal=True)  # True == 1 as a key
        with self.assertRaises(flashrtc.InvalidArgumentError):
            flashrtc.attention(q, k, v, scale=1, causal=1.0)  # 1.0 == True as a key
        with self.assertRaises(flashrtc.InvalidArgumentError):
            flashrtc.attention(q, k, v, scale=1, causal=True, layout="bshd")
        needs_grad = torch.tensor_bhnd((1, 2, 5, 64), requires_grad=True)
        calls = len(self.structs)
        self.assertEqual(flashrtc.attention(needs_grad, k, v, scale=1, causal=True), "operator")
        self.assertEqual(len(self.structs), calls)  # not launched here: autograd's operator does it
        torch.state["grad"] = False  # under no_grad the same tensor takes the plain path
        flashrtc.attention(needs_grad, k, v, scale=1, causal=True)
        self.assertEqual(len(self.structs), calls + 1)
        on_cpu = [torch.tensor_bhnd((1, 2, 5, 64), device_type="cpu") for _ in range(3)]
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "CUDA tensors"):
            flashrtc.attention(*on_cpu, scale=1, causal=True)
        self.assertEqual(len(self.signatures), 1)

    def test_autograd_and_compiling_go_to_the_operator(self):
        torch = self.torch
        q, k, v = (torch.tensor_bhnd((1, 2, 5, 64)) for _ in range(3))
        flashrtc.attention(q, k, v, causal=True)  # cached for the plain path
        needs_grad = torch.tensor_bhnd((1, 2, 5, 64), requires_grad=True)
        for args in ((needs_grad, k, v), (q, k, needs_grad)):
            self.assertEqual(flashrtc.attention(*args, is_causal=True, scale=0.5, deterministic=True), "operator")
            self.assertEqual(self.operator_calls[-1], args + (True, 0.5, None, False, "bhnd", None, None, None, None,
                                                              True, False))
        torch.state["compiling"] = True  # every call, grad or not, before any check or cache lookup
        self.assertEqual(flashrtc.attention(q, k, v, causal=True, return_lse=True), "operator")
        self.assertEqual(self.operator_calls[-1], (q, k, v, True, None, None, True, "bhnd", None, None, None, None,
                                                   None, True))
        self.assertEqual(len(self.structs), 1)

    def test_an_sdpa_call_as_written_launches_what_flashrtcs_keywords_do(self):
        torch = self.torch
        q, k, v = (torch.tensor_bhnd((1, 2, 5, 64)) for _ in range(3))
        for sdpa_args, sdpa_kwargs, ours in (
                ((None, 0.0, True), {"scale": 0.5}, {"causal": True, "scale": 0.5}),
                ((None, 0, False, 0.25), {}, {"scale": 0.25}),
                ((), {"attn_mask": None, "dropout_p": 0.0, "is_causal": True, "enable_gqa": True}, {"causal": True})):
            o = flashrtc.attention(q, k, v, *sdpa_args, **sdpa_kwargs)
            with self.subTest(args=sdpa_args, kwargs=sdpa_kwargs):
                self.same_but_pointers(self.structs[-1][0], self.expected(q, k, v, out=o, **ours))

    def test_sdpa_keywords_share_the_signature_of_their_meaning(self):
        torch = self.torch
        q, k, v = (torch.tensor_bhnd((1, 2, 5, 64)) for _ in range(3))
        flashrtc.attention(q, k, v, causal=True)
        for kwargs in ({"is_causal": True}, {"is_causal": True, "enable_gqa": True},
                       {"causal": True, "enable_gqa": None, "deterministic": False}):
            flashrtc.attention(q, k, v, **kwargs)
            self.assertEqual(self.last().mask, 1)
        flashrtc.attention(q, k, v, is_causal=False)
        self.assertEqual(self.last().mask, 0)
        self.assertEqual(len(self.signatures), 2)
        flashrtc.attention(q, k, v, causal=True, enable_gqa=False)  # checked each time: Hq == Hkv here
        self.assertEqual(self.last().mask, 1)
        gqa_k, gqa_v = (torch.tensor_bhnd((1, 1, 5, 64)) for _ in range(2))
        flashrtc.attention(q, gqa_k, gqa_v)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "enable_gqa=False with 2 query heads"):
            flashrtc.attention(q, gqa_k, gqa_v, enable_gqa=False)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "give one of them"):
            flashrtc.attention(q, k, v, causal=True, is_causal=True)

    def test_the_tensors_device_is_current_during_the_call(self):
        torch = self.torch
        q, k, v = (torch.tensor_bhnd((1, 2, 5, 64), index=1) for _ in range(3))
        for _ in range(2):
            flashrtc.attention(q, k, v)
            self.assertEqual(self.structs[-1][1], 1)
            self.assertEqual(torch.state["device"], 0)

    def test_library_errors_come_through_the_cached_path(self):
        torch = self.torch
        q, k, v = (torch.tensor_bhnd((1, 2, 5, 64)) for _ in range(3))
        flashrtc.attention(q, k, v)
        self.status = 2
        with self.assertRaises(flashrtc.UnsupportedError) as caught:
            flashrtc.attention(q, k, v)
        self.assertEqual(caught.exception.status, 2)
        self.assertEqual(len(self.structs), 2)


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class BackwardSignatureCache(unittest.TestCase):
    """The autograd paths' backward (backward_for_operator) on fake_torch.py tensors: a repeated signature
    launches what prepare_backward() builds for it, with this call's pointers and stream; a changed one is
    checked again, and a mismatch is refused every time."""

    def setUp(self):
        self.library = _library.load()
        self.structs = []
        self.saved_backward = self.library.backward
        self.library.backward = lambda p: self.structs.append(bytes(p)) or 0
        self.installed = fake_torch.installed()
        self.torch = self.installed.__enter__()

    def tearDown(self):
        self.library.backward = self.saved_backward
        self.installed.__exit__(None, None, None)

    def args(self, hq=4, hkv=2, n=5, dtype="bfloat16", dout_strides=None):
        torch = self.torch
        q, o = torch.tensor_bhnd((1, hq, n, 64), dtype), torch.tensor_bhnd((1, hq, n, 64), dtype)
        k, v = torch.tensor_bhnd((1, hkv, n, 64), dtype), torch.tensor_bhnd((1, hkv, n, 64), dtype)
        dout = torch.tensor_bhnd((1, hq, n, 64), dtype, strides=dout_strides)
        return dout, q, k, v, o, torch.tensor_bhnd((1, hq, n), "float32")

    def test_a_repeated_signature_launches_what_the_checks_build(self):
        variants = [dict(), dict(n=6), dict(hkv=4), dict(dtype="float16"),
                    dict(dout_strides=(4 * 5 * 64, 64, 4 * 64, 1))]  # [B, N, H, d] memory
        options = [(0, None, "bhnd", False), (1, 0.5, "bhnd", True), (2, -2.0, "bhnd", False)]
        for variant in variants:
            for option in options:
                for repeat in range(2):
                    self.torch.state["streams"][0] = 0xA00 + repeat
                    args = self.args(**variant)
                    grads = _backward.backward_for_operator(*args, *option)
                    mask, scale, layout, deterministic = option
                    expected = _backward.prepare_backward(*args, causal=_arguments.CAUSAL_BY_MASK[mask], scale=scale,
                                                          layout=layout, deterministic=deterministic, dq=grads[0],
                                                          dk=grads[1], dv=grads[2])
                    with self.subTest(variant=variant, option=option, repeat=repeat):
                        self.assertEqual(self.structs[-1], bytes(expected.params))
                        self.assertEqual([g.shape for g in grads], [x.shape for x in args[1:4]])
        self.assertEqual(len(_signatures.backward_signatures), len(variants) * len(options))

    def test_a_mismatch_is_refused_each_time(self):
        dout, q, k, v, o, lse = self.args()
        _backward.backward_for_operator(dout, q, k, v, o, lse, 1, None, "bhnd", False)
        wrong_lse = self.torch.tensor_bhnd((1, 4, 4), "float32")
        wrong_dout = self.torch.tensor_bhnd((1, 4, 5, 64), "float16")
        for _ in range(2):
            with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "lse has shape"):
                _backward.backward_for_operator(dout, q, k, v, o, wrong_lse, 1, None, "bhnd", False)
            with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "dout has dtype float16"):
                _backward.backward_for_operator(wrong_dout, q, k, v, o, lse, 1, None, "bhnd", False)
        self.assertEqual(len(self.structs), 1)


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class HostOverheadBench(unittest.TestCase):
    def test_the_fake_mode_runs_without_a_gpu(self):  # bench/host_overhead.py --fake, as docs/python.md says
        script = PYTHON_DIR.parent / "bench" / "host_overhead.py"
        r = subprocess.run([sys.executable, str(script), "--fake", "--json", "--calls", "20", "--repetitions", "2"],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, FLASHRTC_LIBRARY=LIBRARY))
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual([row["call"] for row in rows], ["non-causal", "causal + lse"])
        self.assertTrue(all(row["flashrtc_us"] > 0 for row in rows))


@unittest.skipUnless(LIBRARY, "FLASHRTC_LIBRARY not set")
class LibraryErrors(unittest.TestCase):
    """Mistakes only the library checks: its message and status come through; nothing is launched."""

    def check(self, fragment, *args, **kwargs):
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            flashrtc.attention(*args, **kwargs)
        e = caught.exception
        self.assertEqual((e.status, e.status_name), (1, "InvalidArgument"))
        self.assertIn("flashrtc: InvalidArgument: ", str(e))
        self.assertIn(fragment, str(e))

    def test_strides_alignment_shapes_scale_tile(self):
        q, k, v, o = qkvo()
        self.check("q.data=0x", FakeCai((2, 4, 64, 64), ptr=0x7E0000000008), k, v, out=o)
        self.check("k.stride_dim=2", q, FakeCai((2, 2, 128, 64), strides=(32768, 16384, 256, 4)), v, out=o)
        self.check("v.stride_seq=68: must be a multiple of 8 elements", q, k,
                   FakeCai((2, 2, 128, 64), strides=(2 * 128 * 136, 128 * 136, 136, 2)), out=o)
        self.check("o.stride_head=-4096: must be >= 0", q, k, v,
                   out=FakeCai((2, 4, 64, 64), strides=(32768, -8192, 128, 2)))
        self.check("heads_q=3 is not a multiple of heads_kv=2", FakeCai((2, 3, 64, 64)), k, v,
                   out=FakeCai((2, 3, 64, 64)))
        self.check("head_dim=12", *(FakeCai((1, 2, 16, 12)) for _ in range(3)), out=FakeCai((1, 2, 16, 12)))
        for scale in (float("inf"), float("nan")):
            self.check("softmax_scale", q, k, v, out=o, scale=scale)
        self.check("block_n", q, k, v, out=o, config=(64, 12, 4, 1))

    @unittest.skipIf(gpu_present(), "a GPU is present: a valid call would launch on fake pointers")
    def test_valid_calls_reach_the_device_check(self):
        q, k, v, o = qkvo()
        for kwargs in ({}, {"scale": -0.25}, {"scale": 0.0}, {"causal": "bottom-right", "lse_out": lse_for()}):
            with self.assertRaises(flashrtc.NoDeviceError) as caught:
                flashrtc.attention(q, k, v, out=o, **kwargs)
            self.assertEqual(caught.exception.status, 6)
            self.assertIn("flashrtc: NoDevice: ", str(caught.exception))
            self.assertNotIsInstance(caught.exception, ValueError)


if __name__ == "__main__":
    unittest.main()

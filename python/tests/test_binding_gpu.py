"""The Python binding on a GPU, against PyTorch: flashrtc.attention's o and lse against a float64 reference,
with PyTorch's scaled_dot_product_attention on the same inputs setting the tolerance (at most twice the
peer's error, plus eps(dtype) x max|o|: a correct kernel's rounding, with room to round differently). fp16
and bf16 (fp32 too), causal top-left and bottom-right, GQA and MQA, Nq != Nk, both layouts and strided
views, explicit scales, out=/lse_out=, PyTorch's current stream, the array-interface and DLPack paths.

Run: python3 python/tests/test_binding_gpu.py   (with FLASHRTC_LIBRARY set, or the library found
otherwise, see docs/python.md). Without torch or a CUDA device it prints "GPU TESTS SKIPPED" and exits 77.
"""
import math
import sys
import unittest
from pathlib import Path

_CHECKOUT_PYTHON = Path(__file__).resolve().parents[1]
if (_CHECKOUT_PYTHON / "flashrtc" / "__init__.py").exists():  # python/tests in a checkout; staged copies
    sys.path.insert(0, str(_CHECKOUT_PYTHON))                   # sit next to the package instead

import flashrtc  # noqa: E402
import gpu_skip  # noqa: E402  (beside this file, in a checkout and in a staged copy)

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None


SKIP = gpu_skip.reason(torch)  # why the suite cannot run here, or None


def rand(*shape, dtype, device="cuda"):
    return torch.randn(*shape, dtype=dtype, device=device)


def visible(nq, nk, causal, device):
    """[Nq, Nk] bool: which keys each query sees (None: all)."""
    if causal in (False, "none"):
        return None
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    return j <= i if causal in (True, "top-left") else j <= i + nk - nq


def expand_kv(x, heads_q):
    return x.repeat_interleave(heads_q // x.shape[1], dim=1)


def reference(q, k, v, causal=False, scale=None):
    """float64 o and lse of [B, H, N, d] inputs; a query that sees no key gets 0 and -inf."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    q64, k64, v64 = q.double(), expand_kv(k, q.shape[1]).double(), expand_kv(v, q.shape[1]).double()
    s = q64 @ k64.transpose(-1, -2) * scale
    allowed = visible(q.shape[2], k.shape[2], causal, q.device)
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)  # exp(-inf - -inf) on empty rows
    return p @ v64, lse


def sdpa(q, k, v, causal=False, scale=None):
    """PyTorch SDPA in the inputs' dtype (the peer); its rows without a visible key as 0 (backends give NaN
    or, on the H200, some average of v there)."""
    kx, vx = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    # is_causal only where every backend agrees on it: square (backends have differed on the alignment
    # for Nq != Nk) and a positive scale (some give NaN for a negative one: masked -inf times the scale).
    square = q.shape[2] == k.shape[2]
    if causal in (True, "top-left") and square and (scale is None or scale > 0):
        o = F.scaled_dot_product_attention(q, kx, vx, is_causal=True, scale=scale)
    else:
        allowed = visible(q.shape[2], k.shape[2], causal, q.device)
        o = F.scaled_dot_product_attention(q, kx, vx, attn_mask=allowed, scale=scale)
        if allowed is not None:
            o = o.masked_fill(~allowed.any(dim=-1)[:, None], 0.0)
    return torch.nan_to_num(o, nan=0.0)


@unittest.skipIf(SKIP, SKIP or "")
class Parity(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def check(self, q, k, v, causal=False, scale=None, **kwargs):
        """Runs flashrtc and checks o and lse; returns o."""
        o, lse = flashrtc.attention(q, k, v, causal=causal, scale=scale, return_lse=True, **kwargs)
        self.assertEqual((o.shape, o.dtype, o.device), (q.shape, q.dtype, q.device))
        if kwargs.get("layout") == "bnhd":  # the references take [B, H, N, d]
            q, k, v, o_bhnd = (x.transpose(1, 2) for x in (q, k, v, o))
        else:
            o_bhnd = o
        ref_o, ref_lse = reference(q, k, v, causal, scale)
        peer_o = sdpa(q, k, v, causal, scale)
        torch.cuda.synchronize()
        self.assertEqual(lse.shape, (q.shape[0], q.shape[1], q.shape[2]))
        self.assertEqual(lse.dtype, torch.float32)
        err = (o_bhnd.double() - ref_o).abs().max().item()
        peer_err = (peer_o.double() - ref_o).abs().max().item()
        # eps floored at 1e-5 for fp32, whose peers may round differently (TF32 splitting, exp2 approximations)
        eps_term = max(torch.finfo(q.dtype).eps, 1e-5) * max(ref_o.abs().max().item(), 1e-3)
        # The peer sets the tolerance, so it must itself be close: a wrong peer would pass anything.
        self.assertLessEqual(peer_err, 4 * eps_term, f"SDPA itself is off by {peer_err:.3g}: no tolerance")
        allowed = 2 * peer_err + eps_term
        self.assertLessEqual(err, allowed, f"o: max abs error {err:.3g}, SDPA's {peer_err:.3g}")
        finite = torch.isfinite(ref_lse)
        self.assertTrue(torch.equal(torch.isfinite(lse), finite), "lse: -inf exactly where no key is visible")
        self.assertTrue(bool((lse[~finite] == float("-inf")).all()))
        if finite.any():
            lse_err = (lse.double()[finite] - ref_lse[finite]).abs().max().item()
            self.assertLessEqual(lse_err, 1e-3 * max(1.0, ref_lse[finite].abs().max().item()), "lse")
        return o

    def test_square_16bit(self):
        for dtype in (torch.float16, torch.bfloat16):
            for (b, h, n, d) in ((2, 4, 256, 64), (1, 3, 1000, 128), (2, 2, 17, 96), (1, 2, 300, 256), (1, 1, 1, 64)):
                for causal in (False, True):
                    with self.subTest(dtype=dtype, shape=(b, h, n, d), causal=causal):
                        self.check(*(rand(b, h, n, d, dtype=dtype) for _ in range(3)), causal=causal)

    def test_fp32(self):
        for causal in (False, True):
            with self.subTest(causal=causal):
                self.check(*(rand(2, 2, 333, 64, dtype=torch.float32) for _ in range(3)), causal=causal)

    def test_gqa_mqa_and_lengths(self):
        for dtype in (torch.float16, torch.bfloat16):
            for hq, hkv, nq, nk in ((8, 2, 200, 200), (8, 1, 64, 700), (6, 3, 700, 64)):
                for causal in (False, "top-left", "bottom-right"):
                    with self.subTest(dtype=dtype, hq=hq, hkv=hkv, nq=nq, nk=nk, causal=causal):
                        q = rand(2, hq, nq, 64, dtype=dtype)
                        k, v = rand(2, hkv, nk, 64, dtype=dtype), rand(2, hkv, nk, 64, dtype=dtype)
                        self.check(q, k, v, causal=causal)

    def test_bottom_right_rows_without_keys(self):
        q, k, v = rand(1, 2, 300, 64, dtype=torch.bfloat16), *(rand(1, 2, 100, 64, dtype=torch.bfloat16)
                                                               for _ in range(2))
        o = self.check(q, k, v, causal="bottom-right")
        self.assertTrue(bool((o[:, :, :200] == 0).all()))

    def test_scales(self):
        q, k, v = (rand(2, 4, 256, 128, dtype=torch.float16) for _ in range(3))
        for scale in (0.3, -0.2, 0.0):
            with self.subTest(scale=scale):
                self.check(q, k, v, causal=True, scale=scale)

    def test_layouts_and_views(self):
        dtype = torch.bfloat16
        b, n, h, d = 2, 500, 4, 128
        q, k, v = (rand(b, n, h, d, dtype=dtype) for _ in range(3))  # [B, N, H, d]
        o_bnhd = self.check(q, k, v, causal=True, layout="bnhd")
        views = [x.transpose(1, 2) for x in (q, k, v)]  # the same memory as [B, H, N, d]
        o_view = self.check(*views, causal=True)
        self.assertEqual(o_view.stride(), views[0].stride())  # torch.empty_like keeps q's layout
        self.assertTrue(torch.equal(o_view.transpose(1, 2), o_bnhd))
        contiguous = [x.contiguous() for x in views]
        self.assertTrue(torch.equal(flashrtc.attention(*contiguous, causal=True), o_view))
        wide = rand(b, h, n, d + 64, dtype=dtype)  # a padded view: row stride d + 64
        self.check(wide[..., :d], *contiguous[1:], causal=True)

    def test_out_and_lse_out(self):
        q, k, v = (rand(2, 4, 128, 64, dtype=torch.float16) for _ in range(3))
        out = torch.full_like(q, float("nan"))
        lse_out = torch.full((2, 4, 128), float("nan"), device="cuda")
        o, lse = flashrtc.attention(q, k, v, out=out, lse_out=lse_out, return_lse=True)
        self.assertIs(o, out)
        self.assertIs(lse, lse_out)
        ref_o, ref_lse = reference(q, k, v)
        self.assertLess((o.double() - ref_o).abs().max().item(), 1e-2)
        self.assertLess((lse.double() - ref_lse).abs().max().item(), 1e-3)
        lse_out.fill_(float("nan"))
        o = flashrtc.attention(q, k, v, lse_out=lse_out)  # lse_out alone: written, o alone returned
        self.assertIsInstance(o, torch.Tensor)
        torch.cuda.synchronize()
        self.assertLess((lse_out.double() - ref_lse).abs().max().item(), 1e-3)

    def test_repeated_signatures_read_each_calls_tensors(self):
        """The second and later calls of one signature take the cached struct: fresh data, fresh outputs."""
        outputs = []
        for _ in range(3):
            q, k, v = (rand(1, 4, 130, 64, dtype=torch.bfloat16) for _ in range(3))
            outputs.append(self.check(q, k, v, causal=True))
            out = torch.full_like(q, float("nan"))
            self.assertIs(flashrtc.attention(q, k, v, causal=True, out=out), out)
            self.assertTrue(torch.equal(out, outputs[-1]))
        self.assertNotEqual(outputs[0].data_ptr(), outputs[1].data_ptr())

    def test_explicit_tile(self):
        q, k, v = (rand(1, 2, 200, 64, dtype=torch.float32) for _ in range(3))
        self.check(q, k, v, config=(32, 32, 4, 1))
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "block_n"):
            flashrtc.attention(q, k, v, config=(64, 12, 4, 1))


@unittest.skipIf(SKIP, SKIP or "")
class CudaGraphs(unittest.TestCase):
    """flashrtc.attention inside torch.cuda.graph: the replay reads the inputs' current values and gives the
    eager call's bits."""

    def test_capture_and_replay(self):
        torch.manual_seed(2)
        for dtype, causal in ((torch.bfloat16, False), (torch.float16, True), (torch.float32, "bottom-right")):
            with self.subTest(dtype=dtype, causal=causal):
                q, k, v = (rand(2, 4, 333, 64, dtype=dtype) for _ in range(3))
                k, v = k[:, :2], v[:, :2]  # GQA
                flashrtc.attention(q, k, v, causal=causal)  # warm-up outside the capture, as torch asks
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    o_graph = flashrtc.attention(q, k, v, causal=causal)
                for _ in range(2):  # new inputs in place, then replay
                    q.copy_(rand(*q.shape, dtype=dtype))
                    o_graph.fill_(float("nan"))
                    graph.replay()
                    torch.cuda.synchronize()
                    eager = flashrtc.attention(q, k, v, causal=causal)
                    torch.cuda.synchronize()
                    self.assertTrue(torch.equal(o_graph, eager), "replayed output differs from the eager call")


@unittest.skipIf(SKIP, SKIP or "")
class Streams(unittest.TestCase):
    def setUp(self):
        if not hasattr(torch.cuda, "_sleep"):
            self.skipTest("torch.cuda._sleep is missing")
        torch.manual_seed(1)
        self.q, self.k, self.v = (rand(2, 4, 512, 64, dtype=torch.float16) for _ in range(3))
        self.expected = flashrtc.attention(self.q, self.k, self.v)
        torch.cuda.synchronize()

    def delayed_copy_then_attention(self, side, **kwargs):
        """q reaches its buffer on `side` only after a ~50 ms spin; a launch on any other stream would read
        the NaNs that fill the buffer before."""
        q_late = torch.full_like(self.q, float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(100_000_000)
            q_late.copy_(self.q)
        if kwargs:
            return flashrtc.attention(q_late, self.k, self.v, **kwargs)
        with torch.cuda.stream(side):
            return flashrtc.attention(q_late, self.k, self.v)

    def test_current_stream(self):
        side = torch.cuda.Stream()
        o = self.delayed_copy_then_attention(side)
        side.synchronize()
        self.assertTrue(torch.equal(o, self.expected))

    def test_explicit_stream(self):
        for as_handle in (False, True):
            with self.subTest(as_handle=as_handle):
                side = torch.cuda.Stream()
                o = self.delayed_copy_then_attention(side, stream=side.cuda_stream if as_handle else side)
                side.synchronize()
                self.assertTrue(torch.equal(o, self.expected))

    def test_plain_torch_stream(self):
        if not hasattr(torch, "Stream"):
            self.skipTest("torch.Stream is missing")
        side = torch.cuda.Stream()
        plain = torch.Stream(stream_id=side.stream_id, device_index=side.device_index,
                             device_type=side.device_type)
        o = self.delayed_copy_then_attention(side, stream=plain)
        side.synchronize()
        self.assertTrue(torch.equal(o, self.expected))


class _CaiOnly:
    """Hides everything of a torch tensor but __cuda_array_interface__."""

    def __init__(self, t):
        self.__cuda_array_interface__ = t.__cuda_array_interface__


class _DlpackOnly:
    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


@unittest.skipIf(SKIP, SKIP or "")
class OtherInterfacesAndErrors(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(2)

    def test_cuda_array_interface(self):
        q, k, v = (rand(1, 2, 100, 64, dtype=torch.float16) for _ in range(3))
        out = torch.empty_like(q)
        o = flashrtc.attention(*(_CaiOnly(x) for x in (q, k, v)), out=_CaiOnly(out), stream=0)
        self.assertIsInstance(o, _CaiOnly)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, flashrtc.attention(q, k, v, stream=0)))

    def test_dlpack_bfloat16(self):
        q, k, v = (rand(1, 2, 100, 64, dtype=torch.bfloat16) for _ in range(3))
        out = torch.empty_like(q)
        flashrtc.attention(*(_DlpackOnly(x) for x in (q, k, v)), out=_DlpackOnly(out))
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, flashrtc.attention(q, k, v, stream=0)))

    def test_errors(self):
        q = rand(1, 2, 64, 64, dtype=torch.float16)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "q is on cpu"):
            flashrtc.attention(q.cpu(), q, q)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "q has dtype float64"):
            flashrtc.attention(*(q.double(),) * 3)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "k has dtype bfloat16, q has float16"):
            flashrtc.attention(q, q.bfloat16(), q)
        grad = q.clone().requires_grad_()
        self.assertIsNotNone(flashrtc.attention(grad, q, q).grad_fn)  # recorded (test_autograd_gpu.py checks it)
        with torch.no_grad():
            self.assertIsNone(flashrtc.attention(grad, q, q).grad_fn)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "out= is not supported under autograd"):
            flashrtc.attention(grad, q, q, out=torch.empty_like(q))
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "stride_dim"):
            flashrtc.attention(q.transpose(2, 3), q, q)

    @unittest.skipIf(torch is None or not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                     "one CUDA device")
    def test_second_device(self):
        q, k, v = (rand(1, 2, 300, 64, dtype=torch.float16, device="cuda:1") for _ in range(3))
        before = torch.cuda.current_device()
        o = flashrtc.attention(q, k, v, causal=True)
        self.assertEqual(torch.cuda.current_device(), before)
        self.assertEqual(o.device, q.device)
        ref, _ = reference(q, k, v, True)
        self.assertLess((o.double() - ref).abs().max().item(), 1e-2)


if __name__ == "__main__":
    gpu_skip.exit_unless_runnable(torch)
    print(f"flashrtc {flashrtc.library_version()} from {flashrtc.loaded_path()}; torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}")
    unittest.main()

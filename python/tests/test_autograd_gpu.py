"""flashrtc's backward through PyTorch on a GPU: loss.backward() through flashrtc.attention against autograd
through SDPA's math backend in float64 (the inputs cast), with SDPA in the inputs' dtype setting the
tolerance (at most twice the peer's error, plus eps(dtype) x max|reference|: a correct kernel's rounding,
with room to round differently); fp16, bf16 and fp32, every mask, GQA and MQA, Nq != Nk, odd lengths, both
layouts. Then: the deterministic mode's bits, torch.compile(fullgraph=True) forward and backward against
eager, torch.library.opcheck of both operators, and attention_backward's bad input on real tensors
(InvalidArgumentError naming the tensor, gradients untouched).

Run: python3 python/tests/test_autograd_gpu.py (with FLASHRTC_LIBRARY set, or the library found otherwise).
Without torch or a CUDA device it prints "GPU TESTS SKIPPED" and exits 77.
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
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None


SKIP = gpu_skip.reason(torch)  # why the suite cannot run here, or None


def visible(nq, nk, causal, device):
    """[Nq, Nk] bool: which keys each query sees (None: all)."""
    if causal is False:
        return None
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    return j <= i if causal in (True, "top-left") else j <= i + nk - nq


def attention_by(q, k, v, causal, scale, backend=None):
    """o of [B, H, N, d] inputs by SDPA (k, v expanded over the groups; the mask explicit, so Nq != Nk means
    the same alignment everywhere). Rows that see no key: SDPA's softmax has no answer there, so those rows
    go through softmax over zeros times 0 instead (output 0, gradient 0, as flashrtc defines them)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    allowed = visible(q.shape[2], k.shape[2], causal, q.device)
    if allowed is not None and not bool(allowed.any(-1).all()):
        has_key = allowed.any(-1)
        s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
        s = s.masked_fill(~allowed, float("-inf")).masked_fill(~has_key[:, None], 0.0)
        p = torch.softmax(s.to(torch.promote_types(s.dtype, torch.float32)), -1).to(q.dtype)
        return (p * has_key[:, None]) @ v
    if backend is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)


def gradients(fn, inputs, dout):
    """(o, dq, dk, dv) of fn on fresh leaves made from inputs."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    o = fn(*leaves)
    o.backward(dout)
    return (o.detach(),) + tuple(x.grad for x in leaves)


def rand(*shape, dtype, device="cuda"):
    return torch.randn(*shape, dtype=dtype, device=device)


@unittest.skipIf(SKIP, SKIP or "")
class Gradients(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def check(self, q, k, v, causal=False, scale=None, layout="bhnd", causal_keyword="causal"):
        """flashrtc's o, dq, dk, dv against float64 SDPA math, within twice SDPA's own error."""
        bhnd = (lambda x: x.transpose(1, 2)) if layout == "bnhd" else (lambda x: x)
        dout = torch.randn_like(q)
        options = {causal_keyword: causal, "scale": scale, "layout": layout}
        got = gradients(lambda *x: flashrtc.attention(*x, **options), (q, k, v), dout)
        # The references in [B, H, N, d], their results back in the call's layout.
        q_b, k_b, v_b, dout_b = (bhnd(x) for x in (q, k, v, dout))
        ref = gradients(lambda *x: attention_by(*x, causal, scale, SDPBackend.MATH),
                        (q_b.double(), k_b.double(), v_b.double()), dout_b.double())
        peer = gradients(lambda *x: attention_by(*x, causal, scale), (q_b, k_b, v_b), dout_b)
        if not all(bool(torch.isfinite(t).all()) for t in peer):
            # SDPA's fused fp16 kernels return NaN for some calls (a negative scale): its math backend in the
            # input dtype is the peer then.
            peer = gradients(lambda *x: attention_by(*x, causal, scale, SDPBackend.MATH), (q_b, k_b, v_b), dout_b)
        torch.cuda.synchronize()
        eps = max(torch.finfo(q.dtype).eps, 1e-5)  # floored for fp32, whose peers may round differently (TF32)
        for name, mine, reference, other in zip(("o", "dq", "dk", "dv"), got, ref, peer):
            mine = bhnd(mine)
            self.assertEqual(mine.dtype, q.dtype, name)
            self.assertTrue(bool(torch.isfinite(reference).all()), f"{name}: the reference is not finite")
            err = (mine.double() - reference).abs().max().item()
            peer_err = (other.double() - reference).abs().max().item()
            eps_term = eps * max(reference.abs().max().item(), 1e-3)
            self.assertLessEqual(peer_err, 8 * eps_term, f"{name}: SDPA itself is off by {peer_err:.3g}: no tolerance")
            self.assertLessEqual(err, 2 * peer_err + eps_term,
                                 f"{name}: max abs error {err:.3g}, SDPA's {peer_err:.3g}")

    def test_16bit_masks_gqa_lengths(self):
        # (B, Hq, Hkv, Nq, Nk, d): both dtypes at d = 64 and 128, the other head dims in bf16 (each new
        # specialization compiles on first use: this keeps the suite's cold-cache time down)
        shapes = ((2, 4, 4, 256, 256, 64), (1, 4, 2, 1000, 1000, 128), (2, 8, 1, 17, 300, 64),
                  (1, 6, 3, 300, 17, 128))
        extra_bf16 = ((1, 6, 3, 300, 17, 96), (1, 2, 2, 129, 129, 256), (1, 2, 1, 1, 1, 32))
        for dtype in (torch.float16, torch.bfloat16):
            for b, hq, hkv, nq, nk, d in shapes + (extra_bf16 if dtype == torch.bfloat16 else ()):
                for causal in (False, True, "bottom-right"):
                    with self.subTest(dtype=dtype, shape=(b, hq, hkv, nq, nk, d), causal=causal):
                        self.check(rand(b, hq, nq, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype),
                                   rand(b, hkv, nk, d, dtype=dtype), causal=causal)

    def test_fp32(self):
        for causal in (False, True):
            with self.subTest(causal=causal):
                self.check(*(rand(2, 2, 333, 64, dtype=torch.float32) for _ in range(3)), causal=causal)

    def test_layouts_views_and_scales(self):
        dtype = torch.bfloat16
        x = [rand(2, 300, 4, 64, dtype=dtype) for _ in range(3)]  # [B, N, H, d]
        self.check(*x, causal=True, layout="bnhd")
        self.check(*(t.transpose(1, 2) for t in x), causal=True)  # the same memory seen as [B, H, N, d]
        self.check(*(rand(1, 4, 200, 128, dtype=torch.float16) for _ in range(3)), scale=-0.3)
        self.check(*(rand(1, 4, 200, 128, dtype=torch.float16) for _ in range(3)), causal=True, scale=0.2,
                   causal_keyword="is_causal")

    def test_a_broadcast_gradient(self):
        """o.sum() hands the backward a stride-0 dout: it is copied into o's layout first."""
        q, k, v = (rand(1, 2, 100, 64, dtype=torch.bfloat16).requires_grad_() for _ in range(3))
        flashrtc.attention(q, k, v, causal=True).sum().backward()
        ones = torch.ones_like(q)
        ref = gradients(lambda *x: attention_by(*x, True, None, SDPBackend.MATH),
                        (q.double(), k.double(), v.double()), ones.double())
        for name, x, r in zip(("dq", "dk", "dv"), (q, k, v), ref[1:]):
            self.assertLess((x.grad.double() - r).abs().max().item(), 0.05 * max(r.abs().max().item(), 1), name)

    def test_deterministic_mode_gives_the_same_bits(self):
        q = rand(2, 8, 777, 128, dtype=torch.bfloat16)
        k, v = rand(2, 2, 777, 128, dtype=torch.bfloat16), rand(2, 2, 777, 128, dtype=torch.bfloat16)
        dout = torch.randn_like(q)
        runs = [gradients(lambda *x: flashrtc.attention(*x, causal=True, deterministic=True), (q, k, v), dout)
                for _ in range(2)]
        for name, first, second in zip(("o", "dq", "dk", "dv"), *runs):
            self.assertTrue(torch.equal(first, second), f"{name} differs between two deterministic runs")


@unittest.skipIf(SKIP, SKIP or "")
class Compile(unittest.TestCase):
    """torch.compile(fullgraph=True) (inductor) traces through flashrtc.attention without a graph break and
    gives eager's bits (the deterministic backward, so both runs can be compared bit for bit)."""

    def test_forward_and_backward_equal_eager(self):
        def step(q, k, v, w):
            o = flashrtc.attention(q, k, v, is_causal=True, deterministic=True)
            return o, (o.float() * w).sum()

        torch.manual_seed(3)
        for dynamic in (False, True):
            with self.subTest(dynamic=dynamic):
                torch._dynamo.reset()
                compiled = torch.compile(step, fullgraph=True, dynamic=dynamic)
                for n in ((300, 301) if dynamic else (300,)):
                    q = rand(2, 8, n, 64, dtype=torch.bfloat16)
                    k, v = rand(2, 2, n, 64, dtype=torch.bfloat16), rand(2, 2, n, 64, dtype=torch.bfloat16)
                    w = torch.randn(q.shape, device="cuda")
                    results = []
                    for fn in (compiled, step):
                        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
                        o, loss = fn(*leaves, w)
                        loss.backward()
                        results.append((o.detach(),) + tuple(x.grad for x in leaves))
                    for name, a, b in zip(("o", "dq", "dk", "dv"), *results):
                        self.assertTrue(torch.equal(a, b), f"{name}: compiled differs from eager (N={n})")

    def test_inference_under_compile(self):
        q, k, v = (rand(1, 4, 100, 64, dtype=torch.float16) for _ in range(3))
        compiled = torch.compile(lambda q, k, v: flashrtc.attention(q, k, v, causal="bottom-right"), fullgraph=True)
        with torch.no_grad():
            self.assertTrue(torch.equal(compiled(q, k, v), flashrtc.attention(q, k, v, causal="bottom-right")))

    def test_opcheck(self):
        """torch.library's own checks: schema, fake implementation against the real outputs (shapes, dtypes,
        strides), autograd registration, AOT dispatch."""
        q = rand(1, 4, 100, 64, dtype=torch.bfloat16)
        k, v = rand(1, 2, 100, 64, dtype=torch.bfloat16), rand(1, 2, 100, 64, dtype=torch.bfloat16)
        transposed = rand(1, 100, 4, 64, dtype=torch.bfloat16).transpose(1, 2)
        for query in (q, transposed):
            leaves = [x.clone().requires_grad_() for x in (query, k, v)]
            torch.library.opcheck(torch.ops.flashrtc.attention_forward.default,
                                  (*leaves, 1, None, "bhnd", [], True))
        o, lse = flashrtc.attention(q, k, v, causal=True, return_lse=True)
        torch.library.opcheck(torch.ops.flashrtc.attention_backward.default,
                              (torch.randn_like(o), q, k, v, o, lse, 1, None, "bhnd", True))


@unittest.skipIf(SKIP, SKIP or "")
class BadInput(unittest.TestCase):
    """attention_backward on real tensors: InvalidArgumentError naming the tensor, gradients untouched."""

    def setUp(self):
        torch.manual_seed(4)
        self.q = rand(1, 4, 64, 64, dtype=torch.float16)
        self.k, self.v = rand(1, 2, 64, 64, dtype=torch.float16), rand(1, 2, 64, 64, dtype=torch.float16)
        self.o, self.lse = flashrtc.attention(self.q, self.k, self.v, return_lse=True)
        self.dout = torch.randn_like(self.o)
        self.grads = [torch.full_like(x, float("nan")) for x in (self.q, self.k, self.v)]

    def refused(self, fragment, **changes):
        args = dict(dout=self.dout, q=self.q, k=self.k, v=self.v, o=self.o, lse=self.lse)
        args.update(changes)
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            flashrtc.attention_backward(*args.values(), dq=self.grads[0], dk=self.grads[1], dv=self.grads[2])
        self.assertRegex(str(caught.exception), fragment)
        torch.cuda.synchronize()
        self.assertTrue(all(bool(g.isnan().all()) for g in self.grads), "a gradient was written")

    def test_each_tensor_is_named(self):
        self.refused("dout has dtype bfloat16, q has float16", dout=self.dout.bfloat16())
        self.refused("o has shape", o=self.o[:, :, :32])
        self.refused("lse has dtype float16", lse=self.lse.half())
        self.refused("lse has shape", lse=self.lse[:, :2])
        self.refused("lse has strides", lse=self.lse.transpose(1, 2).contiguous().transpose(1, 2))
        self.refused("dout is on cpu", dout=self.dout.cpu())
        self.refused("(?i)d_?o", dout=self.dout.transpose(2, 3).contiguous().transpose(2, 3))  # the library's rule
        self.refused("lse is None", lse=None)

    def test_a_valid_call_writes_them(self):
        dq, dk, dv = flashrtc.attention_backward(self.dout, self.q, self.k, self.v, self.o, self.lse,
                                                 dq=self.grads[0], dk=self.grads[1], dv=self.grads[2])
        self.assertIs(dq, self.grads[0])
        torch.cuda.synchronize()
        self.assertTrue(all(bool(torch.isfinite(g).all()) for g in (dq, dk, dv)))


if __name__ == "__main__":
    gpu_skip.exit_unless_runnable(torch)
    print(f"flashrtc {flashrtc.library_version()} from {flashrtc.loaded_path()}; torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}")
    unittest.main()

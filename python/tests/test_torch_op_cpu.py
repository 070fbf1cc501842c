"""flashrtc's torch.library operators without a GPU, on real torch: their schemas, the fake implementations'
outputs (shapes, dtypes, strides), the argument errors of the autograd and torch.compile path, and the
autograd and torch.compile plumbing end to end (setup_context, the backward's arguments, no graph break).

The plumbing runs on CPU tensors through float64 reference kernels that this test registers for the
operators' CPU dispatch key (the real kernels are CUDA only; python/tests/test_autograd_gpu.py checks
them). Those kernels compute the FlashAttention-2 backward's formulas (P from the saved lse, D =
rowsum(dO * O)), and the gradients that come out of loss.backward() are compared with autograd through
PyTorch's SDPA math backend in float64.

Usage: python3 python/tests/test_torch_op_cpu.py. Without torch it prints "TORCH TESTS SKIPPED" and exits 77.
"""
import math
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

try:
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
except ImportError:
    torch = None

if torch is not None:
    from flashrtc import _torch_ops

    # Every call the reference kernels see: (operator, dout's strides or None, o's strides or None, options).
    KERNEL_CALLS = []

    def _bhnd(layout, *tensors):
        return tuple(x.transpose(1, 2) if layout == "bnhd" else x for x in tensors)

    def _scores(q, k, mask, scale):
        """float64 scores [B, Hq, Nq, Nk] with -inf where the mask hides a key (k expanded over groups)."""
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        k = k.double().repeat_interleave(q.shape[1] // k.shape[1], 1)
        s = q.double() @ k.transpose(-1, -2) * scale
        nq, nk = s.shape[-2:]
        i, j = torch.arange(nq)[:, None], torch.arange(nk)[None]
        hidden = {0: None, 1: j > i, 2: j > i + nk - nq}[mask]
        return s if hidden is None else s.masked_fill(hidden, float("-inf")), scale

    @torch.library.register_kernel("flashrtc::attention_forward", "cpu")
    def _reference_forward(q, k, v, mask, scale, layout, tile, deterministic):
        KERNEL_CALLS.append(("forward", None, None, (mask, scale, layout, list(tile), deterministic)))
        qb, kb, vb = _bhnd(layout, q, k, v)
        s, _ = _scores(qb, kb, mask, scale)
        lse = torch.logsumexp(s, -1)
        p = torch.nan_to_num(torch.exp(s - lse[..., None]))  # a row without keys: 0
        o_ref = p @ vb.double().repeat_interleave(qb.shape[1] // kb.shape[1], 1)
        o, lse_out = _torch_ops.forward_outputs(q, layout)
        o.copy_(_bhnd(layout, o_ref)[0])
        lse_out.copy_(lse)
        return o, lse_out

    @torch.library.register_kernel("flashrtc::attention_backward", "cpu")
    def _reference_backward(dout, q, k, v, o, lse, mask, scale, layout, deterministic):
        KERNEL_CALLS.append(("backward", dout.stride(), o.stride(), (mask, scale, layout, deterministic)))
        qb, kb, vb, ob, dob = _bhnd(layout, q, k, v, o, dout)
        s, scale = _scores(qb, kb, mask, scale)
        p = torch.nan_to_num(torch.exp(s - lse.double()[..., None]))
        group = qb.shape[1] // kb.shape[1]
        do = dob.double()
        dp = do @ vb.double().repeat_interleave(group, 1).transpose(-1, -2)
        ds = p * (dp - (do * ob.double()).sum(-1, keepdim=True))
        dq = ds @ kb.double().repeat_interleave(group, 1) * scale
        per_group = lambda x: x.unflatten(1, (kb.shape[1], group)).sum(2)  # noqa: E731
        dk = per_group(ds.transpose(-1, -2) @ qb.double() * scale)
        dv = per_group(p.transpose(-1, -2) @ do)
        grads = _torch_ops.backward_outputs(q, k, v)
        for out, value in zip(grads, _bhnd(layout, dq, dk, dv)):
            out.copy_(value)
        return grads


def skip_reason():
    return "torch is not installed" if torch is None else None


def sdpa_math_reference(q, k, v, causal, scale, layout, dout):
    """o and the gradients by autograd through SDPA's math backend in float64 (k, v expanded over groups;
    bottom-right as an explicit mask)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    qb, kb, vb = _bhnd(layout, q64, k64, v64)
    group = qb.shape[1] // kb.shape[1]
    kb, vb = kb.repeat_interleave(group, 1), vb.repeat_interleave(group, 1)
    nq, nk = qb.shape[2], kb.shape[2]
    mask = None
    if causal == "bottom-right":
        mask = torch.arange(nk)[None] <= torch.arange(nq)[:, None] + nk - nq
    with sdpa_kernel([SDPBackend.MATH]):
        o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, is_causal=causal is True, scale=scale)
    o = _bhnd(layout, o)[0]
    o.backward(dout.double())
    return o.detach(), q64.grad, k64.grad, v64.grad


def leaves(*shapes, dtype=None, seed=0):
    torch.manual_seed(seed)
    return [torch.randn(*shape, dtype=dtype or torch.float32).requires_grad_() for shape in shapes]


@unittest.skipIf(skip_reason(), skip_reason() or "")
class Schemas(unittest.TestCase):
    def test_the_operators_and_their_arguments(self):
        forward = str(torch.ops.flashrtc.attention_forward.default._schema)
        backward = str(torch.ops.flashrtc.attention_backward.default._schema)
        self.assertEqual(forward, "flashrtc::attention_forward(Tensor q, Tensor k, Tensor v, SymInt mask, "
                                  "float? scale, str layout, SymInt[] tile, bool deterministic) -> (Tensor, Tensor)")
        self.assertEqual(backward, "flashrtc::attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, "
                                   "Tensor o, Tensor lse, SymInt mask, float? scale, str layout, bool deterministic) "
                                   "-> (Tensor, Tensor, Tensor)")


@unittest.skipIf(skip_reason(), skip_reason() or "")
class OpCheck(unittest.TestCase):
    """torch.library.opcheck on the CPU reference kernels: schema, fake implementation against the kernels'
    outputs, autograd registration, AOT dispatch (test_autograd_gpu.py runs it on the CUDA kernels)."""

    def test_forward_and_backward(self):
        q, k, v = leaves((1, 4, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8))
        for query in (q, q.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()):
            torch.library.opcheck(torch.ops.flashrtc.attention_forward.default, (query, k, v, 1, 0.5, "bhnd", [], True))
        o, lse = flashrtc.attention(q, k, v, causal=True, return_lse=True)
        torch.library.opcheck(torch.ops.flashrtc.attention_backward.default,
                              (torch.randn_like(o), q.detach(), k.detach(), v.detach(), o.detach(), lse, 1, None,
                               "bhnd", True))


@unittest.skipIf(skip_reason(), skip_reason() or "")
class FakeImplementations(unittest.TestCase):
    """Under FakeTensorMode (what torch.compile traces with) and on the meta device: o as torch.empty_like(q)
    (q's strides when q is dense, so a transposed view keeps its layout), lse float32 [B, Hq, Nq]
    contiguous, dq, dk, dv as empty_like of q, k, v: the real implementations allocate them by the same
    functions, and test_autograd_gpu.py's opcheck compares the two on a GPU."""

    def forward(self, q, k, v, layout="bhnd"):
        return torch.ops.flashrtc.attention_forward.default(q, k, v, 1, None, layout, [], False)

    def test_forward_outputs(self):
        cases = [  # q's shape, its strides (None: contiguous), k's shape, layout, expected o strides, lse shape
            ((2, 8, 100, 64), None, (2, 2, 300, 64), "bhnd", (51200, 6400, 64, 1), (2, 8, 100)),
            ((2, 8, 100, 64), (51200, 64, 512, 1), (2, 8, 100, 64), "bhnd", (51200, 64, 512, 1), (2, 8, 100)),
            ((2, 100, 8, 64), None, (2, 300, 2, 64), "bnhd", (51200, 512, 64, 1), (2, 8, 100)),
            ((1, 3, 17, 128), (3 * 17 * 256, 17 * 256, 256, 1), (1, 1, 5, 128), "bhnd",
             (3 * 17 * 128, 17 * 128, 128, 1), (1, 3, 17)),  # a padded view is not dense: a contiguous o
        ]
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for q_shape, q_strides, k_shape, layout, o_strides, lse_shape in cases:
                with self.subTest(dtype=dtype, q=q_shape, strides=q_strides, layout=layout):
                    for device in ("fake", "meta"):
                        mode = FakeTensorMode() if device == "fake" else None
                        with mode or torch.device("meta"):
                            size = math.prod(q_shape) * 2
                            q = (torch.empty(size, dtype=dtype).as_strided(q_shape, q_strides) if q_strides
                                 else torch.empty(q_shape, dtype=dtype))
                            k = torch.empty(k_shape, dtype=dtype)
                            o, lse = self.forward(q, k, k, layout)
                        self.assertEqual((tuple(o.shape), o.dtype, o.stride()), (q_shape, dtype, o_strides))
                        self.assertEqual((tuple(lse.shape), lse.dtype, lse.stride()),
                                         (lse_shape, torch.float32, (lse_shape[1] * lse_shape[2], lse_shape[2], 1)))
                        self.assertEqual(o.device, q.device)

    def test_backward_outputs(self):
        with FakeTensorMode():
            q = torch.empty(2, 100, 8, 64, dtype=torch.bfloat16).transpose(1, 2)  # [B, N, H, d] memory
            k = torch.empty(2, 2, 300, 64, dtype=torch.bfloat16)
            o, lse = self.forward(q, k, k)
            dq, dk, dv = torch.ops.flashrtc.attention_backward.default(o, q, k, k, o, lse, 1, None, "bhnd", False)
        for grad, like in ((dq, q), (dk, k), (dv, k)):
            self.assertEqual((grad.shape, grad.dtype, grad.stride()), (like.shape, like.dtype, like.stride()))

    def test_shapes_follow_symbolic_sizes(self):
        """torch.compile(dynamic=True): the fake implementation works on symbolic sizes."""
        def f(q, k, v):
            o, lse = flashrtc.attention(q, k, v, return_lse=True)
            return o, lse

        compiled = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")
        for n in (5, 9):
            q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
            o, lse = compiled(q, k, v)
            self.assertEqual((o.shape, lse.shape), (q.shape, (1, 2, n)))

    def test_a_q_that_is_not_4d(self):
        with FakeTensorMode(), self.assertRaisesRegex(flashrtc.InvalidArgumentError, "q has shape \\(2, 8, 64\\)"):
            q = torch.empty(2, 8, 64)
            self.forward(q, q, q)


@unittest.skipIf(skip_reason(), skip_reason() or "")
class AutogradPlumbing(unittest.TestCase):
    """loss.backward() through flashrtc.attention: the operator saves what the backward needs and passes
    the forward's options; the gradients equal autograd through SDPA's math backend."""

    def setUp(self):
        KERNEL_CALLS.clear()

    def check(self, q, k, v, causal=False, scale=None, layout="bhnd", **kwargs):
        o = flashrtc.attention(q, k, v, causal=causal, scale=scale, layout=layout, **kwargs)
        dout = torch.randn_like(o)
        o.backward(dout)
        ref_o, *ref_grads = sdpa_math_reference(q, k, v, causal, scale, layout, dout)
        self.assertLess((o.detach().double() - ref_o).abs().max().item(), 1e-5)
        for name, x, ref in zip("qkv", (q, k, v), ref_grads):
            self.assertEqual((x.grad.shape, x.grad.dtype), (x.shape, x.dtype), name)
            self.assertLess((x.grad.double() - ref).abs().max().item(), 1e-5, f"d{name}")

    def test_an_sdpa_call_as_written(self):
        """The arguments of a torch.nn.functional.scaled_dot_product_attention call, positional and keyword,
        given to flashrtc.attention unchanged: the same o and gradients (the operator's plumbing, on the CPU
        reference kernels, whose lse is float32 as the real one). SDPA's math backend: its CPU flash backend
        gives NaN for a negative scale with is_causal."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        calls = [((), {}), ((None, 0.0, True), {}), ((None, 0.0, False), {"scale": 0.3}),
                 ((), {"attn_mask": None, "dropout_p": 0.0, "is_causal": True, "scale": -0.5}),
                 ((None,), {"is_causal": True, "enable_gqa": True})]
        for args, kwargs in calls:
            with self.subTest(args=args, kwargs=kwargs):
                gqa = kwargs.get("enable_gqa", False)
                results = []
                for function in (F.scaled_dot_product_attention, flashrtc.attention):
                    q, k, v = leaves((2, 4, 9, 16), (2, 2 if gqa else 4, 9, 16), (2, 2 if gqa else 4, 9, 16),
                                     dtype=torch.float64)
                    with sdpa_kernel([SDPBackend.MATH]):
                        o = function(q, k, v, *args, **kwargs)
                    o.backward(torch.ones_like(o))
                    results.append((o.detach(), q.grad, k.grad, v.grad))
                for name, ours, theirs in zip(("o", "dq", "dk", "dv"), results[1], results[0]):
                    self.assertLess((ours - theirs).abs().max().item(), 1e-5, name)

    def test_masks_gqa_lengths_layouts_scales(self):
        for causal in (False, True, "bottom-right"):
            for hq, hkv, nq, nk in ((4, 4, 17, 17), (4, 2, 5, 13), (6, 1, 13, 5), (2, 2, 1, 1)):
                with self.subTest(causal=causal, hq=hq, hkv=hkv, nq=nq, nk=nk):
                    self.check(*leaves((2, hq, nq, 16), (2, hkv, nk, 16), (2, hkv, nk, 16)), causal=causal)
        self.check(*leaves((2, 9, 4, 8), (2, 9, 2, 8), (2, 9, 2, 8)), causal=True, layout="bnhd")
        self.check(*leaves((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8)), scale=-0.7)

    def test_only_the_tensors_that_require_grad_get_one(self):
        q, k, v = leaves((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8))
        k.requires_grad_(False)
        flashrtc.attention(q, k, v).sum().backward()
        self.assertIsNone(k.grad)
        self.assertIsNotNone(q.grad)
        self.assertIsNotNone(v.grad)

    def test_the_backward_gets_the_forwards_options_and_a_dout_with_os_strides(self):
        q, k, v = leaves((1, 4, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8))
        flashrtc.attention(q, k, v, is_causal=True, scale=0.25, config=(64, 64, 4, 1)).sum().backward()
        self.assertEqual(KERNEL_CALLS[0], ("forward", None, None, (1, 0.25, "bhnd", [64, 64, 4, 1], False)))
        # sum()'s gradient is a broadcast (stride 0): the backward copies it into o's layout first
        self.assertEqual(KERNEL_CALLS[1], ("backward", (224, 56, 8, 1), (224, 56, 8, 1), (1, 0.25, "bhnd", False)))

    def test_deterministic_per_call_and_from_torch(self):
        q, k, v = leaves((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8))
        flashrtc.attention(q, k, v, deterministic=True).sum().backward()
        self.assertTrue(KERNEL_CALLS[-1][3][-1])
        saved = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            flashrtc.attention(q, k, v).sum().backward()
            self.assertTrue(KERNEL_CALLS[-1][3][-1])
            flashrtc.attention(q, k, v, deterministic=False).sum().backward()
            self.assertFalse(KERNEL_CALLS[-1][3][-1])
        finally:
            torch.use_deterministic_algorithms(saved)

    def test_lse_is_returned_but_not_differentiable(self):
        q, k, v = leaves((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8))
        o, lse = flashrtc.attention(q, k, v, return_lse=True)
        self.assertTrue(o.requires_grad)
        self.assertFalse(lse.requires_grad)
        ref = torch.logsumexp(_scores(q.detach(), k.detach(), 0, None)[0], -1)
        self.assertLess((lse.double() - ref).abs().max().item(), 1e-5)

    def test_no_double_backward(self):
        q, k, v = leaves((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8))
        (dq,) = torch.autograd.grad(flashrtc.attention(q, k, v).sum(), q, create_graph=True)
        with self.assertRaisesRegex(RuntimeError, "once_differentiable|does not require grad"):
            dq.sum().backward()

    def test_no_grad_calls_do_not_record(self):
        q, k, v = leaves((1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8))
        with torch.no_grad(), self.assertRaisesRegex(flashrtc.InvalidArgumentError, "q is on cpu"):
            flashrtc.attention(q, k, v)  # the plain path, which takes CUDA tensors only
        self.assertEqual(KERNEL_CALLS, [])


@unittest.skipIf(skip_reason(), skip_reason() or "")
class Compile(unittest.TestCase):
    """torch.compile(fullgraph=True) traces through flashrtc.attention (a graph break would raise) and its
    forward and backward equal the eager call's."""

    def test_forward_and_backward_equal_eager(self):
        def loss(q, k, v, w):
            o = flashrtc.attention(q, k, v, is_causal=True, scale=0.3)
            return (o * w).sum()

        for dynamic in (False, True):
            with self.subTest(dynamic=dynamic):
                torch._dynamo.reset()
                inputs = leaves((2, 4, 9, 16), (2, 2, 9, 16), (2, 2, 9, 16))
                w = torch.randn(2, 4, 9, 16)
                compiled = torch.compile(loss, fullgraph=True, dynamic=dynamic, backend="aot_eager")
                value = compiled(*inputs, w)
                value.backward()
                grads = [x.grad.clone() for x in inputs]
                for x in inputs:
                    x.grad = None
                eager = loss(*inputs, w)
                eager.backward()
                self.assertTrue(torch.equal(value, eager))
                for name, got, x in zip("qkv", grads, inputs):
                    self.assertTrue(torch.equal(got, x.grad), f"d{name}")

    def test_the_first_call_may_be_under_compile(self):
        """No flashrtc call before: tracing imports the operators' module (a plain import while compiling)."""
        code = ("import sys, torch, flashrtc\n"
                "assert 'flashrtc._torch_ops' not in sys.modules\n"
                "graphs = []\n"
                "def backend(gm, example_inputs):\n"
                "    graphs.append(str(gm.graph))\n"
                "    return gm.forward\n"
                "f = torch.compile(lambda q: flashrtc.attention(q, q, q, is_causal=True), fullgraph=True,\n"
                "                  backend=backend)\n"
                "q = torch.randn(1, 2, 5, 8, device='meta')\n"
                "assert f(q).shape == q.shape\n"
                "assert 'flashrtc._torch_ops' in sys.modules and 'flashrtc._torch_ops.attention' in graphs[0], graphs\n")
        env = dict(os.environ, PYTHONPATH=str(_CHECKOUT_PYTHON))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])

    def test_a_module_with_lse_and_layouts(self):
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = torch.nn.Linear(32, 96)

            def forward(self, x):  # x: [B, N, 32] -> heads of 8 in [B, N, H, d]
                q, k, v = self.qkv(x).unflatten(-1, (3, 4, 8)).unbind(2)
                o, lse = flashrtc.attention(q, k, v, causal="bottom-right", layout="bnhd", return_lse=True)
                return o.flatten(2).sum() + lse.sum()

        torch.manual_seed(0)
        block = Block()
        x = torch.randn(2, 6, 32)
        compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
        compiled(x).backward()
        grad = block.qkv.weight.grad.clone()
        block.qkv.weight.grad = None
        block(x).backward()
        self.assertTrue(torch.allclose(grad, block.qkv.weight.grad, rtol=0, atol=1e-6))


@unittest.skipIf(skip_reason(), skip_reason() or "")
class ArgumentErrors(unittest.TestCase):
    """What the autograd and compile path refuses, before any kernel."""

    def setUp(self):
        self.q, self.k, self.v = leaves((1, 4, 7, 8), (1, 2, 7, 8), (1, 2, 7, 8))

    def invalid(self, fragment, *args, **kwargs):
        with self.assertRaises(flashrtc.InvalidArgumentError) as caught:
            flashrtc.attention(*(args or (self.q, self.k, self.v)), **kwargs)
        self.assertIn(fragment, str(caught.exception))

    def test_outputs_and_streams_are_the_operators(self):
        for name in ("out", "lse_out", "stream"):
            with self.subTest(name=name):
                self.invalid(f"{name}= is not supported under autograd or torch.compile", **{name: object()})

    def test_every_input_a_torch_tensor(self):
        class CudaArray:
            __cuda_array_interface__ = {"shape": (1, 2, 7, 8), "typestr": "<f4", "data": (0, False), "version": 3}

        self.invalid("CudaArray: under autograd or torch.compile q, k and v must all be torch tensors", self.q,
                     CudaArray(), self.v)

    def test_sdpa_keywords(self):
        self.invalid("enable_gqa=False with 4 query heads and 2 key/value heads", enable_gqa=False)
        self.invalid("give one of them", causal=False, is_causal=True)
        self.invalid("attn_mask: flashrtc does not take a mask tensor yet", self.q, self.k, self.v,
                     torch.ones(7, 7, dtype=torch.bool), enable_gqa=True)
        self.invalid("dropout_p=0.1: flashrtc has no attention dropout yet", dropout_p=0.1)
        self.invalid("is_causal=1: must be True or False", is_causal=1)
        self.invalid("deterministic='yes': must be True, False or None", deterministic="yes")
        self.invalid("causal='diagonal'", causal="diagonal")
        self.invalid("layout='nhd'", layout="nhd")

    def test_a_tensor_off_cuda_is_refused_alike_with_or_without_grad(self):
        """In a process where no kernel is registered for the CPU (here one is, for the other tests): the
        plain path's InvalidArgumentError whether the call would go to autograd's function, the operator under
        torch.compile, or the plain launch; never torch's "Could not run 'flashrtc::attention_forward' with
        arguments from the 'CPU' backend"."""
        code = ("import torch, flashrtc\n"
                "def message(call):\n"
                "    try:\n"
                "        call()\n"
                "    except flashrtc.InvalidArgumentError as e:\n"
                "        return str(e)\n"
                "    except Exception as e:\n"
                "        return f'{type(e).__name__}: {e}'.replace('\\n', ' ')\n"
                "    return 'no error'\n"
                "q, k, v = (torch.randn(1, 2, 7, 8) for _ in range(3))\n"
                "cuda_like = torch.empty(1, 2, 7, 8, device='meta')\n"
                "print(message(lambda: flashrtc.attention(q, k, v)))\n"
                "print(message(lambda: flashrtc.attention(q.requires_grad_(), k, v)))\n"
                "print(message(lambda: flashrtc.attention(q, k.requires_grad_(), v, is_causal=True)))\n"
                "compiled = torch.compile(lambda q, k, v: flashrtc.attention(q, k, v), backend='aot_eager')\n"
                "print(message(lambda: compiled(q, k, v)))\n"
                "print(message(lambda: flashrtc.attention(cuda_like.requires_grad_(), k, v)))\n")
        env = dict(os.environ, PYTHONPATH=str(_CHECKOUT_PYTHON))
        r = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        lines = r.stdout.splitlines()
        self.assertEqual(lines[:3], ["q is on cpu: flashrtc needs CUDA tensors"] * 3)
        self.assertIn("q is on cpu: flashrtc needs CUDA tensors", lines[3])  # inside torch.compile's error
        self.assertEqual(lines[4], "k is on cpu: flashrtc needs CUDA tensors")  # meta has the fake kernel

    def test_errors_under_compile(self):
        compiled = torch.compile(lambda q, k, v: flashrtc.attention(q, k, v, enable_gqa=False), fullgraph=True,
                                 backend="aot_eager")
        with self.assertRaisesRegex(Exception, "enable_gqa=False with 4 query heads"):
            compiled(self.q, self.k, self.v)


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print(f"TORCH TESTS SKIPPED: {reason}")
        sys.exit(77)
    unittest.main()

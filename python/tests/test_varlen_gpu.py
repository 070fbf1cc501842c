"""flashrtc.attention_varlen on a GPU, against attention computed by torch in float32 over each sequence
separately (explicit math: scores, mask, logsumexp): lengths 1, 2, odd and past a tile, a sequence without
keys (o = 0, lse = -inf), B = 1, many short sequences, Nq != Nk, causal bottom-right with Nq > Nk (and
Nq == Nk equal to SDPA's top-left is_causal), seqused_k, GQA, fp16 and bf16, d 64 and 128, the lse; rows past
cu_seqlens_q[B] keep their bytes; a CUDA graph replayed with other lengths; torch.compile(fullgraph=True) of a
function calling attention_varlen; gradients through the operator against float64 autograd per sequence
(zero outside the sequences, the same bits twice; fp32 has no varlen backward: UnsupportedError);
torch.library.opcheck.

Run: python3 python/tests/test_varlen_gpu.py -v (with FLASHRTC_LIBRARY set, or the library found otherwise).
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
import gpu_skip  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

SKIP = gpu_skip.reason(torch)
# Tolerance on outputs of unit-scale values: the inputs' rounding of p (bf16: 8 bits) over the keys.
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2} if torch is not None else {}


def prefix_sums(lengths):
    """int32 [B + 1] on the GPU."""
    sums = [0]
    for n in lengths:
        sums.append(sums[-1] + n)
    return torch.tensor(sums, dtype=torch.int32, device="cuda")


def reference(q, k, v, cu_q, cu_k, causal=False, scale=None, seqused_k=None, dtype=torch.float32 if torch else None):
    """(o, lse) computed in dtype (differentiable): o [total_q, Hq, d] and lse [Hq, total_q], zero and -inf for
    rows outside every sequence and rows that see no key; query i of sequence b sees key j iff
    j <= i + Lk - Lq when causal."""
    total_q, hq, d = q.shape
    hkv = k.shape[1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    o = torch.zeros(total_q, hq, d, device=q.device, dtype=dtype)
    lse = torch.full((hq, total_q), -math.inf, device=q.device, dtype=dtype)
    cu_q, cu_k = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if seqused_k is not None:
            k1 = k0 + min(int(seqused_k[b]), k1 - k0)
        lq, lk = q1 - q0, k1 - k0
        if lq == 0 or lk == 0:
            continue
        keys = k[k0:k1].to(dtype).repeat_interleave(hq // hkv, 1).transpose(0, 1)  # [Hq, Lk, d]
        values = v[k0:k1].to(dtype).repeat_interleave(hq // hkv, 1).transpose(0, 1)
        s = q[q0:q1].to(dtype).transpose(0, 1) @ keys.transpose(-1, -2) * scale  # [Hq, Lq, Lk]
        if causal:
            i = torch.arange(lq, device=q.device)[:, None]
            j = torch.arange(lk, device=q.device)[None, :]
            s = s.masked_fill(j > i + lk - lq, -math.inf)
        row_lse = torch.logsumexp(s, -1)  # [Hq, Lq]
        p = torch.nan_to_num(torch.exp(s - row_lse[..., None]))
        o[q0:q1] = (p @ values).transpose(0, 1)
        lse[:, q0:q1] = row_lse
    return o, lse


def randn(*shape, dtype, generator):
    return torch.randn(*shape, device="cuda", generator=generator).to(dtype)


@unittest.skipIf(SKIP, SKIP or "")
class Varlen(unittest.TestCase):
    def setUp(self):
        self.g = torch.Generator("cuda").manual_seed(11)

    def check(self, dtype, got, want, what, rows=None):
        """got and want (o, lse) alike within the tolerance, over rows (a slice of the packed tokens; default
        all); the -inf entries of lse exactly where want has them."""
        rows = slice(None) if rows is None else rows
        got_o, got_lse = got[0][rows], got[1][:, rows]
        want_o, want_lse = want[0][rows], want[1][:, rows]
        err = (got_o.float() - want_o).abs().max().item()
        self.assertLess(err, TOLERANCE[dtype] * 4, f"{what}: o differs by {err:.3g}")
        empty = torch.isinf(want_lse)
        self.assertTrue(torch.equal(torch.isinf(got_lse) & (got_lse < 0), empty), f"{what}: -inf entries of lse")
        if (~empty).any():
            lse_err = (got_lse[~empty] - want_lse[~empty]).abs().max().item()
            self.assertLess(lse_err, 1e-2, f"{what}: lse differs by {lse_err:.3g}")

    def run_case(self, lengths_q, lengths_k=None, dtype=None, hq=8, hkv=2, d=64, causal=False, scale=None,
                 seqused=None, pad_q=0, pad_k=0):
        """One call against the reference (dtype default float16); pad_q / pad_k extra rows past the last
        sequence (poisoned queries' output rows must keep their bytes)."""
        dtype = torch.float16 if dtype is None else dtype
        lengths_k = lengths_q if lengths_k is None else lengths_k
        g = self.g
        total_q, total_k = sum(lengths_q) + pad_q, sum(lengths_k) + pad_k
        q = randn(total_q, hq, d, dtype=dtype, generator=g)
        k = randn(total_k, hkv, d, dtype=dtype, generator=g)
        v = randn(total_k, hkv, d, dtype=dtype, generator=g)
        cu_q, cu_k = prefix_sums(lengths_q), prefix_sums(lengths_k)
        used = torch.tensor(seqused, dtype=torch.int32, device="cuda") if seqused is not None else None
        out = torch.full((total_q, hq, d), 123.0, dtype=dtype, device="cuda")
        lse_out = torch.full((hq, total_q), 77.0, device="cuda")
        got = flashrtc.attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), softmax_scale=scale,
                                        causal=causal, seqused_k=used, out=out, lse_out=lse_out, return_lse=True)
        torch.cuda.synchronize()
        self.assertIs(got[0], out)
        self.assertIs(got[1], lse_out)
        want = reference(q, k, v, cu_q, cu_k, causal, scale, used)
        what = (f"{dtype} d={d} Hq={hq} Hkv={hkv} causal={causal} Lq={list(lengths_q)[:12]} "
                f"Lk={list(lengths_k)[:12]}")
        end = sum(lengths_q)
        self.check(dtype, got, want, what, rows=slice(0, end))
        self.assertTrue(torch.equal(out[end:], torch.full_like(out[end:], 123.0)), f"{what}: padding rows of o")
        self.assertTrue(torch.equal(lse_out[:, end:], torch.full_like(lse_out[:, end:], 77.0)),
                        f"{what}: padding columns of lse")
        return q, k, v, cu_q, cu_k, got

    def test_lengths_dtypes_head_dims(self):
        lengths_q = (1, 2, 7, 33, 64, 130)
        lengths_k = (3, 1, 7, 80, 64, 129)
        for dtype in (torch.float16, torch.bfloat16):
            for d in (64, 128):
                for causal in (False, True):
                    self.run_case(lengths_q, lengths_k, dtype=dtype, d=d, causal=causal)

    def test_one_sequence(self):
        self.run_case((257,), (300,), dtype=torch.bfloat16, hq=4, hkv=4, d=128, causal=True)
        self.run_case((1,), (1,), hq=2, hkv=1)

    def test_a_sequence_without_keys(self):
        for causal in (False, True):
            _, _, _, _, _, (o, lse) = self.run_case((5, 9, 3), (4, 0, 6), causal=causal)
            self.assertTrue(torch.equal(o[5:14], torch.zeros_like(o[5:14])))
            self.assertTrue(bool((lse[:, 5:14] == -math.inf).all()))
        # No sequence has a key (k keeps one unused row: an empty torch tensor has no data pointer to pass).
        self.run_case((4, 2), (0, 0), causal=True, pad_k=1)

    def test_many_short_sequences(self):
        g = torch.Generator().manual_seed(3)
        lengths_q = torch.randint(1, 10, (200,), generator=g).tolist()
        lengths_k = torch.randint(1, 12, (200,), generator=g).tolist()
        self.run_case(lengths_q, lengths_k, dtype=torch.bfloat16, hq=4, hkv=1)
        self.run_case(lengths_q, lengths_k, dtype=torch.float16, hq=4, hkv=2, causal=True)

    def test_causal_is_bottom_right_per_sequence(self):
        # Nq > Nk: sequence 0's first 6 queries see no key; Nq < Nk: the queries are the keys' last ones.
        _, _, _, _, _, (o, lse) = self.run_case((10, 3, 17), (4, 20, 17), causal=True, hq=8, hkv=8)
        self.assertTrue(torch.equal(o[:6], torch.zeros_like(o[:6])))
        self.assertTrue(bool((lse[:, :6] == -math.inf).all()))
        self.assertTrue(bool(torch.isfinite(lse[:, 6:]).all()))
        # Nq == Nk in every sequence: the usual (top-left) causal mask, as SDPA's is_causal per sequence.
        q, k, v, cu_q, _, (o, _) = self.run_case((31, 64, 5), causal=True, hq=4, hkv=4, dtype=torch.bfloat16)
        bounds = cu_q.tolist()
        for b in range(3):
            rows = slice(bounds[b], bounds[b + 1])
            want = torch.nn.functional.scaled_dot_product_attention(
                *(t[rows].float().transpose(0, 1) for t in (q, k, v)), is_causal=True).transpose(0, 1)
            err = (o[rows].float() - want).abs().max().item()
            self.assertLess(err, TOLERANCE[torch.bfloat16] * 4, f"sequence {b} against SDPA is_causal: {err:.3g}")

    def test_seqused_k_and_scale(self):
        self.run_case((6, 40, 1), (50, 64, 10), seqused=(50, 17, 0), causal=True, scale=0.3)
        self.run_case((6, 40, 1), (50, 64, 10), seqused=(3, 100, 10), scale=-0.2, dtype=torch.bfloat16)

    def test_padding_rows_keep_their_bytes(self):
        self.run_case((3, 19, 8), (5, 19, 40), pad_q=13, pad_k=7, causal=True)
        self.run_case((70,), (33,), pad_q=1, pad_k=100, dtype=torch.bfloat16, d=128)

    def test_allocated_outputs_and_default_arguments(self):
        g = self.g
        q = randn(24, 4, 64, dtype=torch.float16, generator=g)
        k = randn(30, 2, 64, dtype=torch.float16, generator=g)
        v = randn(30, 2, 64, dtype=torch.float16, generator=g)
        cu_q, cu_k = prefix_sums((10, 14)), prefix_sums((12, 18))
        o = flashrtc.attention_varlen(q, k, v, cu_q, cu_k, 14, 18)
        self.assertEqual((tuple(o.shape), o.dtype, o.is_contiguous()), ((24, 4, 64), torch.float16, True))
        o2, lse = flashrtc.attention_varlen(q, k, v, cu_q, cu_k, 14, 18, return_lse=True)
        self.assertEqual((tuple(lse.shape), lse.dtype, lse.is_contiguous()), ((4, 24), torch.float32, True))
        want = reference(q, k, v, cu_q, cu_k)
        self.check(torch.float16, (o, lse), want, "allocated outputs")
        self.assertTrue(torch.equal(o, o2))

    def test_torch_compile_fullgraph(self):
        g = self.g
        q = randn(40, 8, 64, dtype=torch.bfloat16, generator=g)
        k = randn(50, 2, 64, dtype=torch.bfloat16, generator=g)
        v = randn(50, 2, 64, dtype=torch.bfloat16, generator=g)
        cu_q, cu_k = prefix_sums((9, 1, 30)), prefix_sums((20, 0, 30))

        def step(q, k, v, cu_q, cu_k):
            o, lse = flashrtc.attention_varlen(q, k, v, cu_q, cu_k, 30, 30, causal=True, return_lse=True)
            return o * 2, lse

        o, lse = torch.compile(step, fullgraph=True)(q, k, v, cu_q, cu_k)
        torch.cuda.synchronize()
        self.check(torch.bfloat16, (o / 2, lse), reference(q, k, v, cu_q, cu_k, causal=True), "torch.compile")

    def test_cuda_graph_replays_with_new_lengths(self):
        """The host never reads cu_seqlens: one capture serves any lengths within the max_seqlen bounds."""
        g = self.g
        q = randn(64, 4, 64, dtype=torch.float16, generator=g)
        k = randn(80, 2, 64, dtype=torch.float16, generator=g)
        v = randn(80, 2, 64, dtype=torch.float16, generator=g)
        cu_q, cu_k = prefix_sums((10, 30, 24)), prefix_sums((40, 20, 20))
        out = torch.zeros_like(q)
        lse = torch.zeros(4, 64, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (compile, load) outside the capture
            flashrtc.attention_varlen(q, k, v, cu_q, cu_k, 64, 80, causal=True, out=out, lse_out=lse)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            flashrtc.attention_varlen(q, k, v, cu_q, cu_k, 64, 80, causal=True, out=out, lse_out=lse)
        for lengths_q, lengths_k in (((10, 30, 24), (40, 20, 20)), ((1, 1, 62), (0, 79, 1)),
                                     ((64, 0, 0), (80, 0, 0))):
            cu_q.copy_(prefix_sums(lengths_q))
            cu_k.copy_(prefix_sums(lengths_k))
            graph.replay()
            torch.cuda.synchronize()
            self.check(torch.float16, (out, lse), reference(q, k, v, cu_q, cu_k, causal=True),
                       f"graph replay, lengths {lengths_q} {lengths_k}")

    def grads_case(self, lengths_q, lengths_k, dtype, hq=4, hkv=2, d=64, causal=False, scale=None, seqused=None,
                   pad=3, deterministic=None):
        """loss.backward() through attention_varlen against autograd through the explicit reference in float64,
        within twice the same reference's error in the inputs' dtype plus eps x max|reference| (the rule of
        test_autograd_gpu.py); pad rows past the last sequence of q and k get zero gradients. Two runs give the
        same bits unless deterministic is False."""
        g = self.g
        total_q, total_k = sum(lengths_q) + pad, sum(lengths_k) + pad
        q, k, v = (randn(n, h, d, dtype=dtype, generator=g) for n, h in ((total_q, hq), (total_k, hkv), (total_k, hkv)))
        dout = randn(total_q, hq, d, dtype=dtype, generator=g)
        cu_q, cu_k = prefix_sums(lengths_q), prefix_sums(lengths_k)
        used = torch.tensor(seqused, dtype=torch.int32, device="cuda") if seqused is not None else None

        def grads(fn, cast):
            leaves = [cast(x).detach().requires_grad_() for x in (q, k, v)]
            o = fn(*leaves)
            o.backward(cast(dout))
            return [o.detach()] + [x.grad for x in leaves]

        def mine(*x):
            return flashrtc.attention_varlen(*x, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal,
                                             softmax_scale=scale, seqused_k=used, deterministic=deterministic)

        def math_in(*x):
            return reference(*x, cu_q, cu_k, causal=causal, scale=scale, seqused_k=used, dtype=x[0].dtype)[0]

        got = grads(mine, lambda x: x)
        again = grads(mine, lambda x: x)
        want = grads(math_in, lambda x: x.double())
        peer = grads(math_in, lambda x: x)
        what = f"{dtype} d={d} {hq}/{hkv} causal={causal} lengths {lengths_q} {lengths_k} used {seqused}"
        eps = torch.finfo(dtype).eps
        for name, m, m2, r, pe in zip(("o", "dq", "dk", "dv"), got, again, want, peer):
            if name == "o":  # o's rows past the sequences are never written (a new out: uninitialized)
                m, m2, r, pe = (t[:sum(lengths_q)] for t in (m, m2, r, pe))
            if deterministic is not False:
                self.assertTrue(torch.equal(m, m2), f"{what}: {name} differs between two runs")
            err = (m.double() - r).abs().max().item()
            peer_err = (pe.double() - r).abs().max().item()
            eps_term = eps * max(r.abs().max().item(), 1e-3)
            self.assertLessEqual(err, 2 * peer_err + eps_term, f"{what}: {name} off by {err:.3g}, "
                                 f"the {dtype} math by {peer_err:.3g}")
        for name, grad, start in (("dq", got[1], sum(lengths_q)), ("dk", got[2], sum(lengths_k)),
                                  ("dv", got[3], sum(lengths_k))):
            self.assertTrue(bool((grad[start:] == 0).all()), f"{what}: {name} rows past the sequences not zero")

    def test_gradients(self):
        for dtype in (torch.float16, torch.bfloat16):
            for d in (64, 128):
                for causal in (False, True):
                    self.grads_case((1, 2, 37, 130), (1, 5, 37, 200), dtype, d=d, causal=causal)
        self.grads_case((65, 3), (0, 80), torch.float16, causal=True)  # a sequence without keys: zero dq
        self.grads_case((40, 17), (60, 30), torch.bfloat16, hq=6, hkv=1, scale=0.3, seqused=(45, 30))
        self.grads_case((300,), (300,), torch.float16, hq=2, hkv=2, d=128, causal=True, pad=0)
        self.grads_case(tuple(range(1, 18)) * 4, tuple(range(1, 18)) * 4, torch.bfloat16, causal=True)

    def test_gradients_not_deterministic(self):
        # From 2048 keys of max_seqlen_k (4096 causal) an H100/H200 runs the fused kernel (dq added in fp32 in no
        # fixed order); a sequence with one key whose causal queries mostly see none, a short one, rows after.
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                self.grads_case((700, 1500, 3), (4200, 1, 300), dtype, hq=2, hkv=1, causal=causal,
                                deterministic=False)
        self.grads_case((600, 70), (2100, 65), torch.bfloat16, hq=4, hkv=2, d=128, seqused=(2000, 65),
                        deterministic=False)

    def test_autograd_paths(self):
        g = self.g
        q = randn(12, 4, 64, dtype=torch.float16, generator=g).requires_grad_()
        k = randn(16, 4, 64, dtype=torch.float16, generator=g).requires_grad_()
        v = randn(16, 4, 64, dtype=torch.float16, generator=g)
        cu_q, cu_k = prefix_sums((5, 7)), prefix_sums((8, 8))
        o, lse = flashrtc.attention_varlen(q, k, v, cu_q, cu_k, 7, 8, causal=True, return_lse=True)
        self.assertTrue(o.requires_grad)
        self.check(torch.float16, (o.detach(), lse), reference(q.detach(), k.detach(), v, cu_q, cu_k, causal=True),
                   "under autograd")
        o.float().sum().backward()
        self.assertEqual((q.grad.shape, k.grad.shape), (q.shape, k.shape))
        self.assertIsNone(v.grad)
        with torch.no_grad():  # no grad: the plain path, out= taken
            out = torch.empty_like(o)
            self.assertIs(flashrtc.attention_varlen(q, k, v, cu_q, cu_k, 7, 8, out=out), out)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "out= is not supported"):
            flashrtc.attention_varlen(q, k, v, cu_q, cu_k, 7, 8, out=out)
        qf = q.detach().float().requires_grad_()
        of = flashrtc.attention_varlen(qf, k.detach().float(), v.float(), cu_q, cu_k, 7, 8)
        with self.assertRaises(flashrtc.UnsupportedError):  # fp32 has a forward, no varlen backward
            of.sum().backward()

    def test_opcheck(self):
        """torch.library.opcheck: the schema (nothing written), the fake against the real outputs, tracing
        under AOT dispatch. Every row belongs to a sequence, so every output entry is written."""
        import flashrtc._torch_ops  # noqa: F401  the operators register on import (any earlier test may not have)
        g = self.g
        q = randn(20, 4, 64, dtype=torch.float16, generator=g)
        k = randn(26, 2, 64, dtype=torch.float16, generator=g)
        v = randn(26, 2, 64, dtype=torch.float16, generator=g)
        cu_q, cu_k = prefix_sums((7, 13)), prefix_sums((16, 10))
        used = torch.tensor([16, 4], dtype=torch.int32, device="cuda")
        torch.library.opcheck(torch.ops.flashrtc.attention_varlen.default,
                              (q, k, v, cu_q, cu_k, 13, 16, None, True, None, [], False))
        torch.library.opcheck(torch.ops.flashrtc.attention_varlen.default,
                              (q, k, v, cu_q, cu_k, 13, 16, 0.3, False, used, [], True))

    def test_bad_input_on_real_tensors(self):
        q = randn(8, 2, 64, dtype=torch.float16, generator=self.g)
        cu = prefix_sums((3, 5))
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "cu_seqlens_q has dtype"):
            flashrtc.attention_varlen(q, q, q, cu.long(), cu, 5, 5)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "max_seqlen_q"):
            flashrtc.attention_varlen(q, q, q, cu, cu, 9, 5)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "dtype"):
            flashrtc.attention_varlen(q.double(), q.double(), q.double(), cu, cu, 5, 5)


if __name__ == "__main__":
    gpu_skip.exit_unless_runnable(torch)
    unittest.main()

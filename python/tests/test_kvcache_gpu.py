"""flashrtc.attention_with_kvcache and flashrtc.merge_states on a GPU, against attention computed by torch in
float32 over each sequence's keys gathered by hand: contiguous and paged caches (pages of 16, a shuffled
block table), the append of new keys and values (the caches' bytes checked), ragged cache_seqlens including
0, causal with Nq = 3, GQA, cache_batch_idx, an int cache_seqlens; merge_states against attention over the
union of two key sets; torch.compile(fullgraph=True) of a function calling attention_with_kvcache; a CUDA
graph captured once and replayed with other cache_seqlens values; torch.library.opcheck of the operators.

Run: python3 python/tests/test_kvcache_gpu.py (with FLASHRTC_LIBRARY set, or the library found otherwise).
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
# Tolerance on outputs of unit-scale values: the inputs' rounding of p (bf16: 8 bits) over the cache.
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-4}


def sequence_rows(b, length, page_size, block_table, cache_batch_idx):
    """(page, row) of each of sequence b's first length tokens."""
    if block_table is not None:
        return [(int(block_table[b, j // page_size]), j % page_size) for j in range(length)]
    page = int(cache_batch_idx[b]) if cache_batch_idx is not None else b
    return [(page, j) for j in range(length)]


def reference(q, k_cache, v_cache, k, v, seqlens, block_table=None, cache_batch_idx=None, causal=False,
              scale=None):
    """(o, lse, k_cache', v_cache') in float32: the caches after the append, and attention over each
    sequence's first L_b = seqlens[b] + Nnew keys (query t sees j <= t + L_b - Nq when causal)."""
    k_cache, v_cache = k_cache.float().clone(), v_cache.float().clone()
    batch, nq, hq, d = q.shape
    hkv, page_size = k_cache.shape[2], k_cache.shape[1]
    nnew = 0 if k is None else k.shape[1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    o = torch.zeros(batch, nq, hq, d, device=q.device)
    lse = torch.full((batch, hq, nq), -math.inf, device=q.device)
    for b in range(batch):
        start = int(seqlens[b])
        rows = sequence_rows(b, start + nnew, page_size, block_table, cache_batch_idx)
        for t in range(nnew):
            page, row = rows[start + t]
            k_cache[page, row], v_cache[page, row] = k[b, t].float(), v[b, t].float()
        length = start + nnew
        if length == 0:
            continue
        keys = torch.stack([k_cache[p, r] for p, r in rows])  # [L, Hkv, d]
        values = torch.stack([v_cache[p, r] for p, r in rows])
        keys = keys.repeat_interleave(hq // hkv, 1).transpose(0, 1)  # [Hq, L, d]
        values = values.repeat_interleave(hq // hkv, 1).transpose(0, 1)
        s = q[b].float().transpose(0, 1) @ keys.transpose(-1, -2) * scale  # [Hq, Nq, L]
        if causal:
            i = torch.arange(nq, device=q.device)[:, None]
            j = torch.arange(length, device=q.device)[None, :]
            s = s.masked_fill(j > i + length - nq, -math.inf)
        row_lse = torch.logsumexp(s, -1)  # [Hq, Nq]
        p = torch.nan_to_num(torch.exp(s - row_lse[..., None]))
        o[b] = (p @ values).transpose(0, 1)
        lse[b] = row_lse
    return o, lse, k_cache, v_cache


def randn(*shape, dtype, generator):
    return torch.randn(*shape, device="cuda", generator=generator).to(dtype)


@unittest.skipIf(SKIP, SKIP or "")
class KvCache(unittest.TestCase):
    def setUp(self):
        self.g = torch.Generator("cuda").manual_seed(7)

    def check(self, dtype, got, want, what):
        got_o, got_lse = got
        want_o, want_lse = want
        err = (got_o.float() - want_o).abs().max().item()
        self.assertLess(err, TOLERANCE[str(dtype).replace("torch.", "")] * 4, f"{what}: o differs by {err:.3g}")
        empty = torch.isinf(want_lse)
        self.assertTrue(torch.equal(torch.isinf(got_lse) & (got_lse < 0), empty), f"{what}: -inf rows of lse")
        if (~empty).any():
            lse_err = (got_lse[~empty] - want_lse[~empty]).abs().max().item()
            self.assertLess(lse_err, 1e-2, f"{what}: lse differs by {lse_err:.3g}")

    def run_case(self, dtype, batch=4, nq=1, hq=8, hkv=2, d=64, nnew=1, seqlens=(0, 5, 37, 100), paged=False,
                 causal=True, batch_idx=False, page_size=16, capacity=128):
        g = self.g
        q = randn(batch, nq, hq, d, dtype=dtype, generator=g)
        if paged:
            pages_per_seq = capacity // page_size
            num_pages = batch * pages_per_seq + 3  # spare pages the table never names
            k_cache = randn(num_pages, page_size, hkv, d, dtype=dtype, generator=g)
            table = torch.randperm(num_pages, device="cuda", generator=g)[:batch * pages_per_seq]
            block_table = table.view(batch, pages_per_seq).to(torch.int32)
        else:
            k_cache = randn(batch + 2, capacity, hkv, d, dtype=dtype, generator=g)
            block_table = None
        v_cache = randn(*k_cache.shape, dtype=dtype, generator=g)
        cache_batch_idx = None
        if batch_idx:
            cache_batch_idx = torch.randperm(batch + 2, device="cuda", generator=g)[:batch].to(torch.int32)
        k = v = None
        if nnew:
            k = randn(batch, nnew, hkv, d, dtype=dtype, generator=g)
            v = randn(batch, nnew, hkv, d, dtype=dtype, generator=g)
        lens = torch.tensor(seqlens, dtype=torch.int32, device="cuda")
        want = reference(q, k_cache, v_cache, k, v, lens, block_table, cache_batch_idx, causal)
        o, lse = flashrtc.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens,
                                                 cache_batch_idx=cache_batch_idx, block_table=block_table,
                                                 causal=causal, return_softmax_lse=True)
        torch.cuda.synchronize()
        what = f"{dtype} paged={paged} nq={nq} nnew={nnew} causal={causal} seqlens={seqlens}"
        self.check(dtype, (o, lse), want[:2], what)
        if nnew:
            self.assertTrue(torch.equal(k_cache.float(), want[2]), f"{what}: k_cache after the append")
            self.assertTrue(torch.equal(v_cache.float(), want[3]), f"{what}: v_cache after the append")

    def test_contiguous_cache_with_append(self):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            self.run_case(dtype)

    def test_paged_cache_shuffled_table(self):
        for dtype in (torch.float16, torch.bfloat16):
            self.run_case(dtype, paged=True)
            self.run_case(dtype, paged=True, nnew=0, seqlens=(0, 16, 17, 128), causal=False)

    def test_causal_three_queries_gqa(self):
        self.run_case(torch.bfloat16, nq=3, nnew=3, hq=12, hkv=4, d=128, seqlens=(0, 1, 60, 125))
        self.run_case(torch.float16, nq=3, nnew=3, hq=8, hkv=1, paged=True, seqlens=(2, 0, 31, 80))

    def test_cache_batch_idx(self):
        self.run_case(torch.float16, batch_idx=True)

    def test_int_cache_seqlens(self):
        g = self.g
        q = randn(2, 1, 4, 64, dtype=torch.float16, generator=g)
        kc, vc = (randn(2, 64, 4, 64, dtype=torch.float16, generator=g) for _ in range(2))
        lens = torch.full((2,), 40, dtype=torch.int32, device="cuda")
        want = reference(q, kc, vc, None, None, lens)
        got = flashrtc.attention_with_kvcache(q, kc, vc, cache_seqlens=40, return_softmax_lse=True)
        self.check(torch.float16, got, want[:2], "int cache_seqlens")

    def test_merge_states_is_attention_over_the_union(self):
        g = self.g
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            q = randn(3, 2, 8, 64, dtype=dtype, generator=g)
            kc, vc = (randn(3, 96, 2, 64, dtype=dtype, generator=g) for _ in range(2))
            whole = flashrtc.attention_with_kvcache(q, kc, vc, return_softmax_lse=True)
            first = flashrtc.attention_with_kvcache(q, kc[:, :40].contiguous(), vc[:, :40].contiguous(),
                                                    return_softmax_lse=True)
            second = flashrtc.attention_with_kvcache(q, kc[:, 40:].contiguous(), vc[:, 40:].contiguous(),
                                                     return_softmax_lse=True)
            o, lse = flashrtc.merge_states(first[0], first[1], second[0], second[1])
            want = reference(q, kc, vc, None, None, torch.full((3,), 96, device="cuda"))[:2]
            self.check(dtype, (o, lse), want, f"merge_states {dtype}")
            self.check(dtype, whole, want, f"whole {dtype}")
        # An empty side: the other side's state; both empty: o = 0, lse = -inf.
        o_a = randn(1, 1, 2, 64, dtype=torch.float32, generator=g)
        lse_a = torch.tensor([[[0.5], [-math.inf]]], device="cuda")
        o_b = randn(1, 1, 2, 64, dtype=torch.float32, generator=g)
        lse_b = torch.full((1, 2, 1), -math.inf, device="cuda")
        o, lse = flashrtc.merge_states(o_a, lse_a, o_b, lse_b)
        torch.testing.assert_close(o[:, :, 0], o_a[:, :, 0])
        self.assertAlmostEqual(lse[0, 0, 0].item(), 0.5, places=6)
        self.assertTrue(torch.equal(o[:, :, 1], torch.zeros_like(o[:, :, 1])))
        self.assertEqual(lse[0, 1, 0].item(), -math.inf)

    def test_gradients_are_refused(self):
        q = randn(1, 1, 2, 64, dtype=torch.float16, generator=self.g).requires_grad_()
        kc = randn(1, 16, 2, 64, dtype=torch.float16, generator=self.g)
        with self.assertRaisesRegex(flashrtc.UnsupportedError, "no backward"):
            flashrtc.attention_with_kvcache(q, kc, kc.clone())

    def test_torch_compile_fullgraph(self):
        g = self.g
        q = randn(2, 1, 8, 64, dtype=torch.bfloat16, generator=g)
        kc, vc = (randn(2, 64, 2, 64, dtype=torch.bfloat16, generator=g) for _ in range(2))
        k, v = (randn(2, 1, 2, 64, dtype=torch.bfloat16, generator=g) for _ in range(2))
        lens = torch.tensor([3, 50], dtype=torch.int32, device="cuda")
        want = reference(q, kc, vc, k, v, lens, causal=True)

        def step(q, kc, vc, k, v, lens):
            o, lse = flashrtc.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, causal=True,
                                                     return_softmax_lse=True)
            return o * 2, lse

        compiled = torch.compile(step, fullgraph=True)
        kc_eager = kc.clone()
        o, lse = compiled(q, kc, vc, k, v, lens)
        torch.cuda.synchronize()
        self.check(torch.bfloat16, (o / 2, lse), want[:2], "torch.compile")
        self.assertTrue(torch.equal(kc.float(), want[2]), "the compiled call appends into k_cache")
        self.assertFalse(torch.equal(kc, kc_eager))

        def read(q, kc, vc, lens):  # no append: the operator that writes nothing
            return flashrtc.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True)

        kc_before = kc.clone()
        o = torch.compile(read, fullgraph=True)(q, kc, vc, lens)
        torch.cuda.synchronize()
        want = reference(q, kc, vc, None, None, lens, causal=True)
        self.check(torch.bfloat16, (o, want[1]), want[:2], "torch.compile without an append")
        self.assertTrue(torch.equal(kc, kc_before))

    def test_cuda_graph_replays_with_new_seqlens(self):
        g = self.g
        batch, hq, hkv, d, capacity = 3, 8, 2, 128, 256
        q = randn(batch, 1, hq, d, dtype=torch.float16, generator=g)
        kc, vc = (randn(batch, capacity, hkv, d, dtype=torch.float16, generator=g) for _ in range(2))
        k, v = (randn(batch, 1, hkv, d, dtype=torch.float16, generator=g) for _ in range(2))
        lens = torch.tensor([10, 0, 100], dtype=torch.int32, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (compile, load) outside the capture
            flashrtc.attention_with_kvcache(q, kc.clone(), vc.clone(), k, v, cache_seqlens=lens, causal=True)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        kc0, vc0 = kc.clone(), vc.clone()
        with torch.cuda.graph(graph):
            o, lse = flashrtc.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, causal=True,
                                                     return_softmax_lse=True)
        for values in ([10, 0, 100], [200, 1, 0], [255, 37, 128]):
            kc.copy_(kc0)
            vc.copy_(vc0)
            lens.copy_(torch.tensor(values, dtype=torch.int32))
            want = reference(q, kc0, vc0, k, v, lens, causal=True)
            graph.replay()
            torch.cuda.synchronize()
            self.check(torch.float16, (o, lse), want[:2], f"graph replay, cache_seqlens {values}")
            self.assertTrue(torch.equal(kc.float(), want[2]), f"graph replay {values}: k_cache")

    def test_opcheck(self):
        """torch.library.opcheck: the schemas' write declarations hold (the append writes only the caches, a
        read writes nothing), the fakes match the real outputs, and the operators trace under AOT dispatch."""
        g = self.g
        q = randn(2, 2, 8, 64, dtype=torch.float16, generator=g)
        kc, vc = (randn(2, 32, 2, 64, dtype=torch.float16, generator=g) for _ in range(2))
        k, v = (randn(2, 2, 2, 64, dtype=torch.float16, generator=g) for _ in range(2))
        lens = torch.tensor([4, 30], dtype=torch.int32, device="cuda")
        torch.library.opcheck(torch.ops.flashrtc.attention_with_kvcache.default,
                              (q, kc, vc, k, v, lens, None, None, None, True, 0))
        torch.library.opcheck(torch.ops.flashrtc.attention_over_kvcache.default,
                              (q, kc, vc, lens, None, None, 0.3, False, 2))
        o, lse = flashrtc.attention_with_kvcache(q, kc, vc, return_softmax_lse=True)
        torch.library.opcheck(torch.ops.flashrtc.merge_states.default, (o, lse, o.clone(), lse.clone()))

    def test_bad_input_on_real_tensors(self):
        q = randn(1, 1, 4, 64, dtype=torch.float16, generator=self.g)
        kc = randn(1, 32, 2, 64, dtype=torch.float16, generator=self.g)
        before = kc.clone()
        k = randn(1, 1, 2, 64, dtype=torch.float16, generator=self.g)
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "cache_seqlens has dtype"):
            flashrtc.attention_with_kvcache(q, kc, kc.clone(), k, k, cache_seqlens=torch.zeros(1, device="cuda"))
        with self.assertRaisesRegex(flashrtc.InvalidArgumentError, "cache_seqlens"):
            flashrtc.attention_with_kvcache(q, kc, kc.clone(), k, k)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(kc, before))


if __name__ == "__main__":
    gpu_skip.exit_unless_runnable(torch)
    unittest.main()

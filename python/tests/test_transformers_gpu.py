"""flashrtc as a Hugging Face transformers attention implementation, on a GPU: a small randomly initialised
Llama model (GQA) with attn_implementation="rtc" (flashrtc.transformers.NAME) against the same weights on
"sdpa": prefill logits and greedy KV-cache decoding agree, with and without padding (left and right, a row of
one token; padded batches run flashrtc.attention_varlen); 4D custom masks, sliding windows and dropout are
refused, never computed.

Run: python3 python/tests/test_transformers_gpu.py. Without torch, transformers or a CUDA device it prints
"GPU TESTS SKIPPED" and exits 77.
"""
import copy
import sys
import unittest
from pathlib import Path

_CHECKOUT_PYTHON = Path(__file__).resolve().parents[1]
if (_CHECKOUT_PYTHON / "flashrtc" / "__init__.py").exists():
    sys.path.insert(0, str(_CHECKOUT_PYTHON))

import flashrtc  # noqa: E402
import flashrtc.transformers  # noqa: E402
import gpu_skip  # noqa: E402  (beside this file, in a checkout and in a staged copy)

try:
    import torch
except ImportError:
    torch = None
try:
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:
    transformers = None


def no_grad(test):
    """torch.no_grad() that leaves the test as it is where torch is missing (the class is skipped then)."""
    return torch.no_grad()(test) if torch is not None else test


SKIP = gpu_skip.reason(torch, transformers=transformers)  # why the suite cannot run here, or None


def small_llama(attn_implementation, dtype):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).to(device="cuda", dtype=dtype).eval()
    if attn_implementation != "sdpa":
        model = copy.deepcopy(model)
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(attn_implementation)
        else:
            model.config._attn_implementation = attn_implementation
    return model


@unittest.skipIf(SKIP, SKIP or "")
class TransformersModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        flashrtc.transformers.register()
        cls.reference = small_llama("sdpa", torch.float32)
        cls.model = small_llama(flashrtc.transformers.NAME, torch.float32)
        cls.tokens = torch.randint(0, 512, (2, 77), device="cuda", generator=torch.Generator("cuda").manual_seed(1))

    def test_same_weights(self):
        for a, b in zip(self.reference.parameters(), self.model.parameters()):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(self.model.config._attn_implementation, flashrtc.transformers.NAME)

    @no_grad
    def test_prefill_logits(self):
        ref = self.reference(self.tokens).logits
        got = self.model(self.tokens).logits
        err = (got - ref).abs().max().item()
        self.assertLess(err, 1e-3 * max(1.0, ref.abs().max().item()), f"logits differ by {err:.3g}")

    @no_grad
    def test_kv_cache_decoding(self):
        kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
        ref = self.reference.generate(self.tokens, **kwargs)
        got = self.model.generate(self.tokens, **kwargs)
        self.assertEqual(got.shape, ref.shape)
        self.assertTrue(torch.equal(got, ref), "greedy decoding with a KV cache diverged from sdpa's")

    @no_grad
    def test_decode_steps_use_the_kv_cache_kernel(self):
        """Every step after the prefill goes to attention_with_kvcache (one query over the cache), the
        prefill to the forward; the tokens are sdpa's."""
        calls = []
        original = flashrtc.transformers.attention_with_kvcache

        def counted(q, k_cache, v_cache, **options):
            calls.append((tuple(q.shape), tuple(k_cache.shape), options.get("causal")))
            return original(q, k_cache, v_cache, **options)

        kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
        flashrtc.transformers.attention_with_kvcache = counted
        try:
            got = self.model.generate(self.tokens, **kwargs)
        finally:
            flashrtc.transformers.attention_with_kvcache = original
        self.assertTrue(torch.equal(got, self.reference.generate(self.tokens, **kwargs)))
        layers = self.model.config.num_hidden_layers
        steps = got.shape[1] - self.tokens.shape[1] - 1  # the first new token comes from the prefill
        self.assertGreater(steps, 0)
        self.assertEqual(len(calls), steps * layers)
        self.assertEqual(calls[0], ((2, 1, 8, 32), (2, 78, 2, 32), True))
        self.assertEqual(calls[-1][1], (2, 77 + steps, 2, 32))

    def test_decode_step_matches_the_forward(self):
        """A step of 3 queries over 40 keys (bottom-right causal), non-contiguous keys included, as the
        forward computes it."""
        g = torch.Generator("cuda").manual_seed(3)
        q = torch.randn(2, 8, 3, 64, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(2, 2, 64, 40, device="cuda", dtype=torch.bfloat16, generator=g).transpose(-1, -2)
        v = torch.randn(2, 2, 40, 64, device="cuda", dtype=torch.bfloat16, generator=g)
        module = torch.nn.Module()
        with torch.no_grad():
            got, _ = flashrtc.transformers.attention_forward(module, q, k, v, None, scaling=0.2, is_causal=True)
            ref = flashrtc.attention(q, k.contiguous(), v, causal="bottom-right", scale=0.2)
        self.assertTrue(got.is_contiguous())
        torch.testing.assert_close(got, ref.transpose(1, 2), atol=2e-2, rtol=2e-2)

    @no_grad
    def test_pad_free_mask_passes(self):
        mask = torch.ones_like(self.tokens)
        ref = self.reference(self.tokens, attention_mask=mask).logits
        got = self.model(self.tokens, attention_mask=mask).logits
        self.assertLess((got - ref).abs().max().item(), 1e-3 * max(1.0, ref.abs().max().item()))

    def padded(self, pads, left):
        """self.tokens with pads[b] padding positions (token 0) at the start (left) or end of row b, and the
        mask (1: a token, 0: padding)."""
        mask = torch.ones_like(self.tokens)
        for row, n in enumerate(pads):
            if n:
                if left:
                    mask[row, :n] = 0
                else:
                    mask[row, -n:] = 0
        return self.tokens.masked_fill(mask == 0, 0), mask

    def check_padded_logits(self, tokens, mask):
        """Logits at the tokens' positions as sdpa's with the same mask (padded positions are not compared:
        their attention rows have no key), every layer through attention_varlen."""
        calls = []
        original = flashrtc.transformers.attention_varlen

        def counted(q, k, v, cu_q, cu_k, max_q, max_k, **options):
            calls.append((tuple(q.shape), tuple(k.shape), options.get("causal")))
            return original(q, k, v, cu_q, cu_k, max_q, max_k, **options)

        flashrtc.transformers.attention_varlen = counted
        try:
            got = self.model(tokens, attention_mask=mask).logits
        finally:
            flashrtc.transformers.attention_varlen = original
        ref = self.reference(tokens, attention_mask=mask).logits
        valid = mask.bool()
        err = (got[valid] - ref[valid]).abs().max().item()
        self.assertLess(err, 1e-3 * max(1.0, ref[valid].abs().max().item()), f"logits differ by {err:.3g}")
        tokens_in = int(mask.sum())
        layers = self.model.config.num_hidden_layers
        self.assertEqual(calls, [((tokens_in, 8, 32), (tokens_in, 2, 32), True)] * layers)

    @no_grad
    def test_left_padded_prefill_logits(self):
        self.check_padded_logits(*self.padded((5, 30), left=True))

    @no_grad
    def test_right_padded_prefill_logits(self):
        self.check_padded_logits(*self.padded((30, 5), left=False))

    @no_grad
    def test_a_row_of_one_token(self):
        self.check_padded_logits(*self.padded((0, 76), left=True))
        self.check_padded_logits(*self.padded((76, 0), left=False))

    @no_grad
    def test_left_padded_greedy_decoding(self):
        """generate with a left-padded batch: the prefill and every decoding step (a query over the padded
        cache) run attention_varlen; the tokens are sdpa's."""
        tokens, mask = self.padded((9, 40), left=True)
        kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
        ref = self.reference.generate(tokens, attention_mask=mask, **kwargs)
        got = self.model.generate(tokens, attention_mask=mask, **kwargs)
        self.assertEqual(got.shape, ref.shape)
        self.assertTrue(torch.equal(got, ref), "greedy decoding of a left-padded batch diverged from sdpa's")

    def test_padded_attention_matches_each_row_alone(self):
        """attention_forward with the mask _mask returns (GQA, 3 queries over 40 keys, as a decoding step over
        a padded cache, and a prefill): each row's queries are flashrtc.attention over the row's tokens alone
        (bottom-right causal, and without a mask), padded queries are zeros."""
        from transformers.masking_utils import bidirectional_mask_function, causal_mask_function

        g = torch.Generator("cuda").manual_seed(4)
        module = torch.nn.Module()
        for n_q, mask_function, causal in ((3, causal_mask_function, True), (40, causal_mask_function, True),
                                           (40, bidirectional_mask_function, False)):
            q = torch.randn(3, 8, n_q, 64, device="cuda", generator=g)
            k = torch.randn(3, 2, 40, 64, device="cuda", generator=g)
            v = torch.randn(3, 2, 40, 64, device="cuda", generator=g)
            padding = torch.ones(3, 40, dtype=torch.long, device="cuda")
            padding[0, :7] = 0    # left padding
            padding[1, -2:] = 0   # right padding: with 3 queries, the last two are padding
            padding[2, :39] = 0   # one token
            mask = flashrtc.transformers._mask(batch_size=3, q_length=n_q, kv_length=40, q_offset=40 - n_q,
                                               kv_offset=0, mask_function=mask_function, attention_mask=padding)
            self.assertEqual(tuple(mask.shape), (3, 1, 1, 40))
            self.assertEqual(mask.dtype, torch.bool)
            with torch.no_grad():
                got, _ = flashrtc.transformers.attention_forward(module, q, k, v, mask, scaling=0.2,
                                                                 is_causal=causal)
            self.assertEqual(tuple(got.shape), (3, n_q, 8, 64))
            for row in range(3):
                keys = padding[row].bool()
                queries = keys[40 - n_q:]
                if queries.any():
                    ref = flashrtc.attention(q[row:row + 1, :, queries], k[row:row + 1, :, keys],
                                             v[row:row + 1, :, keys], causal="bottom-right" if causal else False,
                                             scale=0.2)
                    torch.testing.assert_close(got[row, queries], ref[0].transpose(0, 1), atol=1e-4, rtol=1e-4)
                self.assertTrue(bool((got[row, ~queries] == 0).all()), "padded queries are zeros")

    @no_grad
    def test_mask_without_padding_is_none(self):
        from transformers.masking_utils import causal_mask_function
        mask = torch.ones(2, 12, dtype=torch.long, device="cuda")
        self.assertIsNone(flashrtc.transformers._mask(batch_size=2, q_length=1, kv_length=12, q_offset=11,
                                                      mask_function=causal_mask_function, attention_mask=mask))
        mask[1, 0] = 0
        got = flashrtc.transformers._mask(batch_size=2, q_length=1, kv_length=12, q_offset=11,
                                          mask_function=causal_mask_function, attention_mask=mask)
        self.assertTrue(torch.equal(got[:, 0, 0], mask.bool()))
        # Keys past the 2D mask's end are padding, as transformers reads it.
        got = flashrtc.transformers._mask(batch_size=2, q_length=2, kv_length=14, q_offset=12,
                                          mask_function=causal_mask_function, attention_mask=mask)
        self.assertFalse(bool(got[:, 0, 0, 12:].any()))

    def test_unsupported_features_are_refused(self):
        q = torch.randn(1, 8, 4, 32, device="cuda")
        module = torch.nn.Module()
        with self.assertRaisesRegex(NotImplementedError, "dropout"):
            flashrtc.transformers.attention_forward(module, q, q[:, :2], q[:, :2], None, dropout=0.1)
        with self.assertRaisesRegex(NotImplementedError, "sliding window"):
            flashrtc.transformers.attention_forward(module, q, q[:, :2], q[:, :2], None, sliding_window=128)
        with self.assertRaisesRegex(NotImplementedError, "attention mask"):
            flashrtc.transformers.attention_forward(module, q, q, q, torch.ones(1, 1, 4, 4, device="cuda"))
        # A 4D bool mask per query (not the [B, 1, 1, Nk] padding mask _mask makes) is a custom mask.
        with self.assertRaisesRegex(NotImplementedError, "attention mask"):
            flashrtc.transformers.attention_forward(module, q, q, q,
                                                    torch.ones(1, 1, 4, 4, dtype=torch.bool, device="cuda"))

    @no_grad
    def test_custom_masks_are_refused(self):
        """A 4D mask passed to the model, and a 2D mask under a mask function flashrtc does not compute."""
        from transformers.masking_utils import causal_mask_function
        custom = torch.ones(2, 1, 77, 77, dtype=torch.bool, device="cuda").tril()
        with self.assertRaisesRegex(NotImplementedError, "attention mask"):
            self.model(self.tokens, attention_mask=custom)
        padding = torch.ones(2, 10, dtype=torch.long, device="cuda")
        padding[0, 0] = 0
        with self.assertRaisesRegex(NotImplementedError, "mask function"):
            flashrtc.transformers._mask(batch_size=2, q_length=10, kv_length=10,
                                        mask_function=lambda batch, head, q, kv: kv <= q,
                                        attention_mask=padding)
        with self.assertRaisesRegex(NotImplementedError, "custom attention mask"):
            flashrtc.transformers._mask(batch_size=2, q_length=10, kv_length=10, mask_function=causal_mask_function,
                                        attention_mask=padding[:, None, None, :])


if __name__ == "__main__":
    gpu_skip.exit_unless_runnable(torch, transformers=transformers)
    unittest.main()

"""flashrtc as a Hugging Face transformers attention implementation, on a GPU: a small randomly initialised
Llama model (GQA) with attn_implementation="rtc" (flashrtc.transformers.NAME) against the same weights on "sdpa": prefill logits and
greedy KV-cache decoding agree; padding masks, sliding windows and dropout are refused, never computed.

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

    @no_grad
    def test_padding_is_refused(self):
        mask = torch.ones_like(self.tokens)
        mask[0, :5] = 0
        with self.assertRaisesRegex(NotImplementedError, "padding mask"):
            self.model(self.tokens, attention_mask=mask)

    def test_unsupported_features_are_refused(self):
        q = torch.randn(1, 8, 4, 32, device="cuda")
        module = torch.nn.Module()
        with self.assertRaisesRegex(NotImplementedError, "dropout"):
            flashrtc.transformers.attention_forward(module, q, q[:, :2], q[:, :2], None, dropout=0.1)
        with self.assertRaisesRegex(NotImplementedError, "sliding window"):
            flashrtc.transformers.attention_forward(module, q, q[:, :2], q[:, :2], None, sliding_window=128)
        with self.assertRaisesRegex(NotImplementedError, "attention mask"):
            flashrtc.transformers.attention_forward(module, q, q, q, torch.ones(1, 1, 4, 4, device="cuda"))


if __name__ == "__main__":
    gpu_skip.exit_unless_runnable(torch, transformers=transformers)
    unittest.main()

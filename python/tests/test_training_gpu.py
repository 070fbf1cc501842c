"""A small training run on flashrtc against the same model on SDPA, eager and under torch.compile, on a GPU.

The model: one causal self-attention layer (4 query heads over 2 key/value heads, head dim 32, bf16
attention inside an fp32 model, an output projection, no residual) and a linear head over the mean of the
sequence, trained with Adam for 300 full-batch steps to memorize the classes of fixed random sequences
(fixed seed, the same initial weights for every run). Each run records its loss curve.

The tolerance comes from SDPA itself: two of its fused backends (FlashAttention-2 and memory-efficient) are
both correct and still round differently in bf16, and the training dynamics amplify that into curves that
drift apart by some amount D = max over steps |loss_efficient - loss_flash|. flashrtc is another correct
kernel rounding differently, so its curve may drift from SDPA-flash's by at most 2 D, plus 0.2% of the
first loss against a D that happens to be tiny; under torch.compile, D also covers the drift of compiled
SDPA from eager SDPA (inductor fuses the surrounding ops and rounds differently too). Every run must also
actually learn: its last loss below 20% of its first.

Run: python3 python/tests/test_training_gpu.py. Without torch or a CUDA device it prints "GPU TESTS SKIPPED"
and exits 77.
"""
import copy
import sys
import unittest
from pathlib import Path

_CHECKOUT_PYTHON = Path(__file__).resolve().parents[1]
if (_CHECKOUT_PYTHON / "flashrtc" / "__init__.py").exists():
    sys.path.insert(0, str(_CHECKOUT_PYTHON))

import flashrtc  # noqa: E402
import gpu_skip  # noqa: E402  (beside this file, in a checkout and in a staged copy)

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None

STEPS = 300
BATCH, SEQLEN, MODEL_DIM, HEADS, KV_HEADS, CLASSES = 64, 128, 128, 4, 2, 10
HEAD_DIM = MODEL_DIM // HEADS
LEARNING_RATE = 5e-4
RELATIVE_FLOOR = 2e-3  # of the first loss: the absolute part of the tolerance
LEARNED = 0.2  # the last loss must be below this fraction of the first


SKIP = gpu_skip.reason(torch)  # why the suite cannot run here, or None


def flashrtc_attention(q, k, v):
    return flashrtc.attention(q, k, v, is_causal=True)


def sdpa_attention(backend=None):
    def attend(q, k, v):
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        if backend is None:  # SDPA's own choice (what torch.compile sees)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return attend


class Model(torch.nn.Module if torch is not None else object):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(MODEL_DIM, (HEADS + 2 * KV_HEADS) * HEAD_DIM)
        self.proj = torch.nn.Linear(MODEL_DIM, MODEL_DIM)
        self.head = torch.nn.Linear(MODEL_DIM, CLASSES)
        self.attend = None

    def forward(self, x):  # x: [B, N, MODEL_DIM]
        b, n, _ = x.shape
        q, k, v = self.qkv(x).unflatten(-1, (HEADS + 2 * KV_HEADS, HEAD_DIM)).split([HEADS, KV_HEADS, KV_HEADS], 2)
        q, k, v = (t.transpose(1, 2).to(torch.bfloat16) for t in (q, k, v))  # [B, H, N, d]
        o = self.attend(q, k, v).transpose(1, 2).reshape(b, n, MODEL_DIM).float()
        return self.head(self.proj(o).mean(1))  # no residual: every class goes through the attention


def train(initial, attend, compile_model):
    """The loss of each step, from the same initial weights and data."""
    model = copy.deepcopy(initial)
    model.attend = attend
    step_model = torch.compile(model, fullgraph=True) if compile_model else model
    generator = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(BATCH, SEQLEN, MODEL_DIM, device="cuda", generator=generator)
    labels = torch.randint(0, CLASSES, (BATCH,), device="cuda", generator=generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(step_model(x), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).double().cpu()


@unittest.skipIf(SKIP, SKIP or "")
class Training(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.initial = Model().cuda()
        cls.flash = train(cls.initial, sdpa_attention(SDPBackend.FLASH_ATTENTION), False)
        cls.efficient = train(cls.initial, sdpa_attention(SDPBackend.EFFICIENT_ATTENTION), False)
        cls.drift = (cls.efficient - cls.flash).abs().max().item()

    def check(self, name, losses, drift):
        allowed = 2 * drift + RELATIVE_FLOOR * self.flash[0].item()
        got = (losses - self.flash).abs().max().item()
        print(f"\n{name}: loss {losses[0].item():.4f} -> {losses[-1].item():.4f}; max |loss - SDPA-flash's| {got:.3g}, "
              f"allowed {allowed:.3g} (SDPA's drift {drift:.3g})")
        for curve, label in ((self.flash, "SDPA-flash"), (self.efficient, "SDPA-efficient"), (losses, name)):
            self.assertLess(curve[-1].item(), LEARNED * curve[0].item(), f"{label} did not learn")
        self.assertLessEqual(got, allowed, f"{name}'s loss curve left SDPA's")

    def test_eager(self):
        self.check("flashrtc eager", train(self.initial, flashrtc_attention, False), self.drift)

    def test_compiled(self):
        compiled_sdpa = train(self.initial, sdpa_attention(), True)
        drift = max(self.drift, (compiled_sdpa - self.flash).abs().max().item())
        self.check("flashrtc compiled", train(self.initial, flashrtc_attention, True), drift)


if __name__ == "__main__":
    gpu_skip.exit_unless_runnable(torch)
    print(f"flashrtc {flashrtc.library_version()} from {flashrtc.loaded_path()}; torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}")
    unittest.main()

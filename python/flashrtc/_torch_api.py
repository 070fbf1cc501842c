"""The torch functions flashrtc's per-call paths use, looked up once. torch is optional: importing flashrtc
must not import it, so nothing here does until a call with torch tensors in hand asks for them (torch is
imported by then: its tensors are here).
"""
from __future__ import annotations

import sys
from typing import NamedTuple


class TorchApi(NamedTuple):
    """The torch functions a call uses, looked up once."""
    empty_like: object
    empty: object
    float32: object
    is_grad_enabled: object
    current_device: object          # () -> index
    current_raw_stream: object      # (index) -> CUstream handle
    device_guard: object            # torch.cuda.device


# [TorchApi] once looked up, else empty: the per-call paths read cache[0] without a function call. Only
# ever changed in place (clear, append, slice assignment), so a module holding this list sees the change.
cache: list = []


def api() -> TorchApi:
    """The torch functions, imported and looked up at the first call."""
    if cache:
        return cache[0]
    import torch  # only reached with torch tensors in hand
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # skips building a Stream object per call
    if raw is None:
        def raw(index):
            return torch.cuda.current_stream(index).cuda_stream
    looked_up = TorchApi(torch.empty_like, torch.empty, torch.float32, torch.is_grad_enabled,
                         getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device), raw, torch.cuda.device)
    cache.append(looked_up)
    return looked_up


def compiling() -> bool:
    """Whether torch.compile is tracing this call (torch only looked up, never imported, here; a torch older
    than torch.compiler has no operator path)."""
    torch = sys.modules.get("torch")
    return torch is not None and hasattr(torch, "compiler") and torch.compiler.is_compiling()


def deterministic_default() -> bool:
    """deterministic=None's meaning: torch.are_deterministic_algorithms_enabled(), False where torch is not
    imported (no torch setting to follow)."""
    torch = sys.modules.get("torch")
    enabled = getattr(torch, "are_deterministic_algorithms_enabled", None)
    return bool(enabled()) if enabled is not None else False

"""flashrtc.attention: where a call goes. A plain call is one flashrtc_attention_forward launch (_forward):
a torch call whose signature was checked before reuses its prepared struct right here, any other goes
through the checks. Calls that autograd or torch.compile must see (a torch tensor that requires grad with
grad enabled, or any call while compiling) go to the torch operators (_torch_ops): the torch.library operator
while compiling, an eager autograd function otherwise, whose forward is the same launch (a signature seen
with the lse skips the checks there too).

The torch operators' module imports torch, which is optional: it is imported at the first call that needs it.
"""
from __future__ import annotations

from typing import Optional

from ._arguments import CANONICAL_CAUSAL, CAUSAL_KEY_TYPES, FLAG_TYPES, SCALE_KEY_TYPES, check_flag, \
    check_sdpa_unsupported, merge_causal
from ._errors import InvalidArgumentError
from ._forward import launch_and_remember
from ._signatures import forward_key, forward_signatures
from ._tensors import KIND_TORCH, kind_of, torch_types
from ._torch_api import api as torch_api, cache as torch_api_cache, compiling


def attention(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
              scale: Optional[float] = None, enable_gqa: Optional[bool] = None, *, causal=None,
              return_lse: bool = False, layout: str = "bhnd", config=None, out=None, lse_out=None, stream=None,
              deterministic: Optional[bool] = None):
    """Forward attention, o = softmax(scale * q k^T + mask) v, with fp32 accumulation; differentiable for
    torch tensors (autograd, torch.compile). Takes torch.nn.functional.scaled_dot_product_attention's
    arguments in its order, so it replaces an SDPA call as it is written (with the limits below).

    q: [B, Hq, Nq, d]; k, v: [B, Hkv, Nk, d] (layout="bhnd", PyTorch SDPA's order; layout="bnhd" reads
    [B, N, H, d], FlashAttention's). Strides come from the tensors, so contiguous tensors, transposed views
    of the other order and padded views work without copies; the head dim must be contiguous and every
    other stride a multiple of 16 bytes. dtype float16, bfloat16 or float32, the same for q, k, v; d a
    multiple of 8 up to 256; Hq a multiple of Hkv (GQA, MQA); any Nq, Nk >= 1.

    Tensors: torch tensors, or objects with __cuda_array_interface__ or __dlpack__ (these need out=, and
    lse_out= for the lse: only torch can allocate them here).
    attn_mask, dropout_p: SDPA's; flashrtc has neither a mask tensor nor dropout yet, so only None and 0.0 are
        taken (anything else is an InvalidArgumentError, never ignored).
    is_causal: SDPA's, True (key j visible to query i iff j <= i, "top-left") or False (default).
    scale: softmax scale, default 1/sqrt(d); any finite value.
    enable_gqa: SDPA's flag. None (default) and True group query heads over key/value heads (Hq a multiple
        of Hkv); False refuses Hq != Hkv as SDPA does. (SDPA's default, False, refuses what flashrtc's
        default serves: a call valid for SDPA is valid here.)
    causal: flashrtc's richer is_causal, keyword only: False, True or "top-left" (as is_causal=True), or
        "bottom-right" (j <= i + Nk - Nq, FlashAttention's). Given, it decides, and is_causal must be left
        False. A query that sees no key gets 0 and lse -inf.
    return_lse: also return the log-sum-exp, float32 [B, Hq, Nq], natural log (never differentiable).
    config: explicit tile (block_m, block_n, warps, stages), as a sequence, a mapping or an object with
        those attributes; default: flashrtc's table.
    out: where to write o (shape, dtype and device of q; any valid strides); default torch.empty_like(q).
    lse_out: where to write the lse (float32 [B, Hq, Nq], contiguous); implies it is computed.
    stream: CUstream handle or stream object; default: PyTorch's current stream on q's device for torch
        tensors, else the stream a __cuda_array_interface__ names, else the legacy default stream.
    deterministic: for the backward pass (autograd), as attention_backward() takes it: True, the same
        gradient bits on every run (an atomic-free dq pass); False, on sm_90a from 2048 keys (4096
        causal) the fused backward kernel, whose dq, added with fp32 atomics, may differ in its last bits
        between runs; default
        torch.are_deterministic_algorithms_enabled(). The forward is deterministic anyway.

    Autograd: when grad is enabled and a torch tensor among q, k, v requires grad, the call runs as the
    operator flashrtc::attention_forward and loss.backward() computes dq, dk, dv with flashrtc's backward;
    under torch.compile every call is that operator. Both need q, k, v as torch tensors and take neither
    out=, lse_out= nor stream= (InvalidArgumentError): use torch.cuda.stream(...) for a stream. A tensor
    off CUDA is the same InvalidArgumentError on every path, requiring grad or not.

    Asynchronous on that stream. Returns o, or (o, lse) with return_lse. Raises TypeError for objects that
    are not tensors, InvalidArgumentError (a ValueError) for wrong values, whichever side found them,
    LibraryNotFoundError when libflashrtc.so cannot be loaded, and the FlashrtcError subclass of the C
    API's status otherwise (NoDeviceError, NvrtcError with the compile log, DriverError, ...).
    """
    if attn_mask is not None or type(dropout_p) is not float or dropout_p != 0.0:
        check_sdpa_unsupported(attn_mask, dropout_p)
    if causal is None and type(is_causal) is bool:  # SDPA's is_causal alone (or neither)
        causal = is_causal
    else:
        causal = merge_causal(causal, is_causal)
    if compiling():
        return _through_operator(q, k, v, causal, scale, enable_gqa, return_lse, layout, config, out, lse_out,
                                 stream, deterministic, traced=True)
    key = None
    if (lse_out is None and stream is None and config is None and torch_types.get(type(q))
            and type(k) is type(q) and type(v) is type(q) and q.is_cuda and k.is_cuda and v.is_cuda
            and (out is None or type(out) is type(q) and out.is_cuda) and type(causal) in CAUSAL_KEY_TYPES
            and type(scale) in SCALE_KEY_TYPES and type(layout) is str and enable_gqa is not False
            and type(enable_gqa) in FLAG_TYPES and type(deterministic) in FLAG_TYPES):
        torch = torch_api_cache[0] if torch_api_cache else torch_api()
        if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
            key = forward_key(q, k, v, causal, scale, return_lse, layout, out)
            signature = forward_signatures.get(key)
            if signature is not None:
                return signature.run(q, k, v, out)
        elif out is None:  # autograd: a signature with the lse (the backward needs it) skips the checks too
            lse_key = forward_key(q, k, v, CANONICAL_CAUSAL.get(causal), scale, True, layout, None)
            signature = forward_signatures.get(lse_key)
            if signature is not None:
                return _torch_ops().eager_attention(signature, q, k, v, deterministic, return_lse)
    if _wants_grad(q, k, v):
        return _through_operator(q, k, v, causal, scale, enable_gqa, return_lse, layout, config, out, lse_out,
                                 stream, deterministic, traced=False)
    check_flag(deterministic, "deterministic")
    return launch_and_remember(key, q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                               return_lse=return_lse, layout=layout, config=config, out=out, lse_out=lse_out,
                               stream=stream)


def _wants_grad(q, k, v) -> bool:
    """A torch tensor among q, k, v requires grad with grad enabled: autograd must record the call. Another
    object that says it requires grad is refused: flashrtc's gradients go through PyTorch's autograd only."""
    tensors = []
    for name, t in (("q", q), ("k", k), ("v", v)):
        if kind_of(t) == KIND_TORCH:
            tensors.append(t)
        elif getattr(t, "requires_grad", False) is True:
            raise InvalidArgumentError(f"{name} is a {type(t).__module__}.{type(t).__qualname__} that requires grad: "
                                       "flashrtc computes gradients through PyTorch's autograd only; pass torch "
                                       "tensors (e.g. torch.from_dlpack)")
    return bool(tensors) and torch_api().is_grad_enabled() and any(t.requires_grad for t in tensors)


def _through_operator(q, k, v, causal, scale, enable_gqa, return_lse, layout, config, out, lse_out, stream,
                      deterministic, traced):
    return _torch_ops().attention(q, k, v, causal, scale, enable_gqa, return_lse, layout, config, out, lse_out,
                                  stream, deterministic, traced)


_torch_ops_module: list = []


def _torch_ops():
    """The module of the torch.library operators: imported at its first use (it imports torch and registers
    them; a plain import while compiling)."""
    if not _torch_ops_module:
        from . import _torch_ops as module
        _torch_ops_module.append(module)
    return _torch_ops_module[0]



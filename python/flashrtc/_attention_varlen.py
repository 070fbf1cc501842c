"""flashrtc.attention_varlen: a plain launch (_varlen), or the torch.library operator when torch.compile
traces or autograd records the call (_torch_ops, imported at that first need since it imports torch).

Apart from _varlen, which the operators import too: the backward the operator runs lives there
(varlen_backward), and _torch_ops must not import a module that imports it back.
"""
from __future__ import annotations

from typing import Optional

from ._arguments import check_flag
from ._tensors import KIND_TORCH, kind_of
from ._torch_api import api as torch_api, compiling
from ._varlen import launch_varlen, prepare_varlen


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, *,
                     softmax_scale: Optional[float] = None, causal: bool = False, seqused_k=None,
                     return_lse: bool = False, out=None, lse_out=None, stream=None, config=None,
                     deterministic: Optional[bool] = None):
    """Attention over B sequences of their own lengths packed one after another without padding
    (docs/varlen.md); FlashAttention's flash_attn_varlen_func, argument for argument where both have one.

    q: [total_q, Hq, d]; k, v: [total_k, Hkv, d]. Sequence b owns the query rows
        cu_seqlens_q[b] .. cu_seqlens_q[b + 1] and the key rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1], and
        attends only its own keys.
    cu_seqlens_q, cu_seqlens_k: int32 [B + 1] device tensors on q's device, prefix sums of the lengths
        (cu_seqlens[0] = 0). Read on the device only, never by the host: a value out of range is clamped
        (to the tensors' rows; a decreasing entry gives an empty sequence), never read or written past them.
    max_seqlen_q, max_seqlen_k: Python ints, at least every sequence's query / key length (as FlashAttention
        takes them): the grid covers max_seqlen_q queries per sequence (a longer sequence's later rows are
        not computed), and both pick the tile. 1 <= max_seqlen_q <= total_q, 0 <= max_seqlen_k <= total_k.
    softmax_scale: default 1/sqrt(d); any finite value.
    causal: False, or True: bottom-right aligned per sequence, FlashAttention's varlen meaning (and
        attention_with_kvcache's): query i of sequence b sees key j iff j <= i + Lk_b - Lq_b, so the queries
        are the last Lq_b positions of the sequence's keys. Where Lq_b == Lk_b (self-attention over packed
        sequences) this is the usual top-left mask j <= i. A query that sees no key (Lk_b = 0, or the first
        Lq_b - Lk_b queries when Lq_b > Lk_b) gets o = 0 and lse = -inf.
    seqused_k: optional int32 [B]: sequence b attends only its first seqused_k[b] keys (clamped to
        [0, its key count]).
    return_lse: also return the log-sum-exp, float32 [Hq, total_q] (FlashAttention's varlen layout),
        natural log, contiguous.
    out: where to write o (shape, dtype and device of q); default a new contiguous tensor. Rows past
        cu_seqlens_q[B] belong to no sequence and are never written: a given out keeps them as they were,
        a new one leaves them uninitialized (as the lse's columns past cu_seqlens_q[B]).
    lse_out: where to write the lse (float32 [Hq, total_q], contiguous); implies it is computed.
    stream, config: as flashrtc.attention's (tensors that are not torch tensors need out=, and lse_out= for
        the lse).
    deterministic: for the backward (autograd), as flashrtc.attention takes it: True, the main kernel and
        the atomic-free dQ pass (the same bits every run); False, on an H100/H200 where the fused kernel
        serves the call (from 2048 keys of max_seqlen_k, 4096 causal), dQ added in fp32 in no fixed order;
        None (default) follows torch.are_deterministic_algorithms_enabled().

    dtype float16, bfloat16 or float32 (no backward for float32), the same for q, k, v; d a multiple of 8 up to
    256; Hq a multiple of Hkv (GQA, MQA); the head dim contiguous and the other strides multiples of 16 bytes. Asynchronous on the stream; no host synchronisation, so a
    CUDA graph replays it for any cu_seqlens values.

    Autograd and torch.compile: with grad enabled and a torch tensor among q, k, v that requires grad, or
    while compiling, the call is the operator flashrtc::attention_varlen (then out=, lse_out= and stream=
    are refused: use torch.cuda.stream(...)). Its backward is flashrtc_attention_varlen_backward (dq, dk, dv
    zero on rows outside every sequence).

    Returns out, or (out, lse) with return_lse. Raises InvalidArgumentError naming the argument (nothing
    launched), and the C API's errors as flashrtc.attention does.
    """
    check_flag(deterministic, "deterministic")
    if compiling() or kind_of(q) == KIND_TORCH and _recorded((q, k, v)):
        return _torch_ops().attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                             softmax_scale, causal, seqused_k, return_lse, out, lse_out, stream,
                                             config, deterministic)
    call = prepare_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          softmax_scale=softmax_scale, causal=causal, seqused_k=seqused_k, return_lse=return_lse,
                          out=out, lse_out=lse_out, stream=stream, config=config)
    launch_varlen(call)
    return (call.out, call.lse) if return_lse else call.out


def _recorded(tensors) -> bool:
    """Whether autograd would record the call: an input requires grad, with grad enabled."""
    return any(getattr(t, "requires_grad", False) is True for t in tensors) and torch_api().is_grad_enabled()


_torch_ops_module: list = []


def _torch_ops():
    if not _torch_ops_module:
        from . import _torch_ops as module
        _torch_ops_module.append(module)
    return _torch_ops_module[0]

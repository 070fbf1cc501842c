"""flashrtc.attention_with_kvcache and flashrtc.merge_states: a plain launch (_kvcache), or the torch.library
operator while torch.compile traces (_torch_ops, imported at that first need since it imports torch).
"""
from __future__ import annotations

from typing import Optional

from ._kvcache import launch_kvcache, launch_merge, prepare_kvcache, prepare_merge
from ._tensors import KIND_TORCH, kind_of
from ._torch_api import compiling


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None, cache_batch_idx=None,
                           block_table=None, softmax_scale: Optional[float] = None, causal: bool = False,
                           num_splits: int = 0, return_softmax_lse: bool = False, out=None, lse_out=None,
                           stream=None):
    """Attention of a few new query tokens per sequence over a KV cache (decoding, speculative decoding),
    appending new keys and values first; FlashAttention's flash_attn_with_kvcache, argument for argument.

    q: [B, Nq, Hq, d]. k_cache, v_cache: [B_cache, N_cache, Hkv, d] (contiguous cache: sequence b in row
        cache_batch_idx[b], or b), or [num_blocks, page_size, Hkv, d] with block_table (paged; page_size a
        power of two). Written where k, v are appended.
    k, v: optional [B, Nnew, Hkv, d], written into the caches at positions cache_seqlens[b] .. + Nnew (in
        place) before the attention.
    cache_seqlens: int32 [B] device tensor (or a Python int for every sequence): tokens in each cache before
        the append, clamped to [0, capacity - Nnew]. None: every cache is full (then k, v must be None).
    cache_batch_idx: int32 [B], contiguous caches only. block_table: int32 [B, max_blocks]: the pages of
        each sequence. A page id or index outside the cache holds nothing (keys hidden, appends dropped).
    softmax_scale: default 1/sqrt(d). causal: True masks query t of sequence b to keys j <= t + L_b - Nq,
        L_b = cache_seqlens[b] + Nnew (queries at the end of the sequence, FlashAttention's meaning).
    num_splits: key splits per sequence and KV head: 0 chooses from the shapes only (so a CUDA graph
        replays for any cache_seqlens), else 1 to 256.
    return_softmax_lse: also return the lse, float32 [B, Hq, Nq], natural log (-inf for a row that sees no
        key; its output row is 0).
    out, lse_out, stream: as flashrtc.attention's (tensors that are not torch tensors need out=).

    dtype float16, bfloat16 or float32, the same for every float tensor; d a multiple of 8 up to 256; Hq a
    multiple of Hkv; the head dim contiguous and other strides multiples of 16 bytes. Inference only: no
    gradients (a call that autograd would record raises UnsupportedError). Asynchronous on the stream.
    Returns out, or (out, lse). Raises InvalidArgumentError naming the argument (nothing launched, caches
    untouched), and the C API's errors as flashrtc.attention does.
    """
    if compiling():
        return _torch_ops().attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx,
                                                   block_table, softmax_scale, causal, num_splits,
                                                   return_softmax_lse)
    if kind_of(q) == KIND_TORCH:
        _torch_ops_if_grad((q, k_cache, v_cache, k, v))
    call = prepare_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                           block_table=block_table, softmax_scale=softmax_scale, causal=causal,
                           num_splits=num_splits, return_lse=return_softmax_lse, out=out, lse_out=lse_out,
                           stream=stream)
    launch_kvcache(call)
    return (call.out, call.lse) if return_softmax_lse else call.out


def merge_states(o_a, lse_a, o_b, lse_b, *, out=None, lse_out=None, stream=None):
    """The attention over the union of two disjoint key sets, from each set's output and lse:
    lse = log(exp(lse_a) + exp(lse_b)), o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b, in fp32; a row empty
    in both (lse -inf) gets o = 0, lse = -inf.

    o_a, o_b: [B, N, H, d] (float16, bfloat16 or float32, alike); lse_a, lse_b: float32 [B, H, N], contiguous.
    out, lse_out may be o_a / lse_a themselves (in place). Inference only, as attention_with_kvcache.
    Returns (o, lse)."""
    if compiling():
        return _torch_ops().merge_states(o_a, lse_a, o_b, lse_b)
    if kind_of(o_a) == KIND_TORCH:
        _torch_ops_if_grad((o_a, lse_a, o_b, lse_b))
    call = prepare_merge(o_a, lse_a, o_b, lse_b, out=out, lse_out=lse_out, stream=stream)
    launch_merge(call)
    return call.out, call.lse


def _torch_ops_if_grad(tensors) -> None:
    """Refuses a call autograd would record (UnsupportedError), without importing the operators otherwise."""
    if any(getattr(t, "requires_grad", False) is True for t in tensors):
        _torch_ops().refuse_gradients(tensors)


_torch_ops_module: list = []


def _torch_ops():
    if not _torch_ops_module:
        from . import _torch_ops as module
        _torch_ops_module.append(module)
    return _torch_ops_module[0]

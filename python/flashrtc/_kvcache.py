"""Attention over a KV cache and merge_states: argument checks and marshalling into one
flashrtc_attention_with_kvcache or flashrtc_merge_states call. prepare_*() checks everything and builds the C
struct, allocating the outputs (torch only); launch_*() calls the library. The public functions (_decode)
and the torch operators' CUDA implementations (_torch_ops) come here.

The shapes are FlashAttention's flash_attn_with_kvcache's: q [B, Nq, Hq, d]; k_cache, v_cache
[B_cache, N_cache, Hkv, d], or [num_blocks, page_size, Hkv, d] with block_table [B, max_blocks] int32; k, v
[B, Nnew, Hkv, d]; cache_seqlens, cache_batch_idx [B] int32. The library checks the strides, the alignment
and the cross-field rules (validate_kvcache); what is checked here is what only Python sees (the shapes as
tensors carry them, dtypes, devices, read-only buffers) and what a C field could not hold.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from . import _bounds, _library
from ._arguments import check_lse, check_same_device, scale_of
from ._errors import InvalidArgumentError, shown
from ._marshal import launch as launch_on_device, maybe_stream, resolve_stream, tensor_struct, torch_stream
from ._streams import dlpack_stream
from ._tensors import KIND_TORCH, TensorView, kind_of, view

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


class KernelCall(NamedTuple):
    """A checked call: the C struct, the outputs, and what keeps the inputs' memory alive until it returns."""
    params: object
    out: object
    lse: object
    views: tuple  # holds DLPack capsules
    torch_device: Optional[int]


def causal_mask(causal) -> int:
    """flash_attn_with_kvcache's causal: True is bottom-right (queries follow the cached keys)."""
    if type(causal) is not bool:
        raise InvalidArgumentError(f"causal={shown(causal)}: must be True (queries aligned to the end of each "
                                   "sequence's keys) or False")
    return _library.MASK_CAUSAL_BOTTOM_RIGHT if causal else _library.MASK_NONE


def check_dims(name: str, t: TensorView, dims: int, text: str) -> None:
    if len(t.shape) != dims:
        raise InvalidArgumentError(f"{name} has shape {t.shape}: expected {dims} dims, {text}")


def check_int32(name: str, t: TensorView, shape: tuple, text: str) -> None:
    """An int32 index tensor of the given shape whose last dim is contiguous."""
    if t.dtype != "int32":
        raise InvalidArgumentError(f"{name} has dtype {t.dtype}: it must be int32")
    if t.shape != shape:
        raise InvalidArgumentError(f"{name} has shape {t.shape}: expected {text} = {list(shape)}")
    if shape[-1] > 1 and t.strides[-1] != 1:
        raise InvalidArgumentError(f"{name} has strides {t.strides}: its last dim must be contiguous")


def check_writable(name: str, t: TensorView) -> None:
    if t.readonly:
        raise InvalidArgumentError(f"{name} is read-only: flashrtc writes it")


def allocate(given, name, shape, dtype_name, q, torch_mode, allocation_stream, export_stream):
    """(object, view) of an output: the given one, or a contiguous torch tensor on q's device."""
    if given is None:
        if not torch_mode:
            raise InvalidArgumentError(f"q is a {kind_of(q)} object, not a torch tensor: pass {name}= "
                                       f"({dtype_name} {list(shape)}); flashrtc allocates only torch tensors")
        import torch
        with maybe_stream(torch, allocation_stream):
            given = torch.empty(shape, dtype=getattr(torch, dtype_name), device=q.device)
    ov = view(name, given, export_stream)
    check_writable(name, ov)
    return given, ov


def _seqlens_tensor(cache_seqlens, batch, q, torch_mode, allocation_stream):
    """An int cache_seqlens as a [B] int32 torch tensor, as flash_attn_with_kvcache broadcasts it."""
    value = _bounds.integer(cache_seqlens, "cache_seqlens", INT32_MIN, INT32_MAX)
    if not torch_mode:
        raise InvalidArgumentError(f"cache_seqlens={value} with a q that is not a torch tensor: pass an int32 "
                                   "[B] device tensor (flashrtc makes one from an int only with torch)")
    import torch
    with maybe_stream(torch, allocation_stream):
        return torch.full((batch,), value, dtype=torch.int32, device=q.device)


def prepare_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None, cache_batch_idx=None,
                    block_table=None, softmax_scale=None, causal=False, num_splits=0, return_lse=False,
                    out=None, lse_out=None, stream=None) -> KernelCall:
    """Everything attention_with_kvcache() does short of launching."""
    mask = causal_mask(causal)
    scale = scale_of(softmax_scale)
    splits = _bounds.integer(num_splits, "num_splits", INT32_MIN, INT32_MAX)  # the library names its range
    if (k is None) != (v is None):
        raise InvalidArgumentError(f"{'v' if k is None else 'k'} is given without {'k' if k is None else 'v'}: "
                                   "new keys and values are appended together")
    torch_mode = kind_of(q) == KIND_TORCH
    handle = resolve_stream(stream, q, [kind_of(q)], torch_mode)
    export_stream = dlpack_stream(handle)
    named = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)]
    named += [("k", k), ("v", v)] if k is not None else []
    views = {name: view(name, x, export_stream) for name, x in named}
    qv, kcv, vcv = views["q"], views["k_cache"], views["v_cache"]
    check_dims("q", qv, 4, "[B, Nq, Hq, d]")
    for name in ("k_cache", "v_cache"):
        check_dims(name, views[name], 4, "[B_cache, N_cache, Hkv, d] or [num_blocks, page_size, Hkv, d]")
    if qv.dtype not in _library.DTYPES:
        raise InvalidArgumentError(f"q has dtype {qv.dtype}: flashrtc takes float16, bfloat16 and float32")
    for name, t in views.items():
        if t.dtype != qv.dtype:
            raise InvalidArgumentError(f"{name} has dtype {t.dtype}, q has {qv.dtype}: they must match")
    batch, seqlen_q, heads_q, head_dim = qv.shape
    if kcv.shape != vcv.shape:
        raise InvalidArgumentError(f"k_cache has shape {kcv.shape} and v_cache {vcv.shape}: they must match")
    num_pages, page_size, heads_kv, cache_dim = kcv.shape
    if cache_dim != head_dim:
        raise InvalidArgumentError(f"k_cache has head dim {cache_dim}, q has {head_dim}: they must match")
    seqlen_new = 0
    if k is not None:
        for name in ("k", "v"):
            check_dims(name, views[name], 4, "[B, Nnew, Hkv, d]")
        seqlen_new = views["k"].shape[1]
        expected = (batch, seqlen_new, heads_kv, head_dim)
        for name in ("k", "v"):
            if views[name].shape != expected:
                raise InvalidArgumentError(f"{name} has shape {views[name].shape}: expected [B, Nnew, Hkv, d] = "
                                           f"{list(expected)} (B, Hkv, d of q and the cache)")
    for name in ("k_cache", "v_cache"):
        check_writable(name, views[name])

    allocation_stream = torch_stream(stream, handle, q) if torch_mode and stream is not None else None
    if isinstance(cache_seqlens, int):
        cache_seqlens = _seqlens_tensor(cache_seqlens, batch, q, torch_mode, allocation_stream)
    index_views = {}
    if cache_seqlens is not None:
        index_views["cache_seqlens"] = view("cache_seqlens", cache_seqlens, export_stream)
        check_int32("cache_seqlens", index_views["cache_seqlens"], (batch,), "[B]")
    if cache_batch_idx is not None:
        index_views["cache_batch_idx"] = view("cache_batch_idx", cache_batch_idx, export_stream)
        check_int32("cache_batch_idx", index_views["cache_batch_idx"], (batch,), "[B]")
    if block_table is not None:
        tv = view("block_table", block_table, export_stream)
        check_dims("block_table", tv, 2, "[B, max_blocks]")
        check_int32("block_table", tv, (batch, tv.shape[1]), "[B, max_blocks]")
        index_views["block_table"] = tv

    out, ov = allocate(out, "out", (batch, seqlen_q, heads_q, head_dim), qv.dtype, q, torch_mode,
                        allocation_stream, export_stream)
    if ov.shape != qv.shape or ov.dtype != qv.dtype:
        raise InvalidArgumentError(f"out is {ov.dtype} {ov.shape}, q {qv.dtype} {qv.shape}: they must match")
    lse, lv = None, None
    if return_lse or lse_out is not None:
        lse, lv = allocate(lse_out, "lse_out", (batch, heads_q, seqlen_q), "float32", q, torch_mode,
                            allocation_stream, export_stream)
        check_lse("lse_out", lv, (batch, heads_q, seqlen_q))
    outputs = {"out": ov, **({"lse_out": lv} if lv else {})}
    check_same_device(tuple({**views, **index_views, **outputs}.items()))

    p = _library.load().new_optional_params(_library.KvCacheParams, "flashrtc_attention_with_kvcache")
    p.dtype = _library.DTYPES[qv.dtype]
    p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.head_dim = batch, seqlen_q, heads_q, heads_kv, head_dim
    p.q, p.k_cache, p.v_cache, p.o = (tensor_struct(t, "bnhd") for t in (qv, kcv, vcv, ov))
    p.num_pages, p.page_size = num_pages, page_size
    if k is not None:
        p.k_new, p.v_new = tensor_struct(views["k"], "bnhd"), tensor_struct(views["v"], "bnhd")
        p.seqlen_new = seqlen_new
    if "block_table" in index_views:
        tv = index_views["block_table"]
        p.block_table = tv.ptr or None
        p.max_pages_per_seq = tv.shape[1]
        p.block_table_stride = tv.strides[0] if batch > 1 else tv.shape[1]
    if "cache_seqlens" in index_views:
        p.cache_seqlens = index_views["cache_seqlens"].ptr or None
    if "cache_batch_idx" in index_views:
        p.cache_batch_idx = index_views["cache_batch_idx"].ptr or None
    p.lse = lv.ptr if lv else None
    if scale is not None:
        p.softmax_scale, p.has_softmax_scale = scale, 1
    p.mask = mask
    p.num_splits = splits
    p.stream = handle or None
    keep = tuple(views.values()) + tuple(index_views.values()) + tuple(outputs.values())
    # cache_seqlens made from an int is kept alive with the call (the launch reads it asynchronously, and
    # torch's caching allocator orders its reuse on the stream).
    return KernelCall(p, out, lse, keep + (cache_seqlens,), qv.device if torch_mode else None)


def prepare_merge(o_a, lse_a, o_b, lse_b, *, out=None, lse_out=None, stream=None) -> KernelCall:
    """Everything merge_states() does short of launching."""
    torch_mode = kind_of(o_a) == KIND_TORCH
    handle = resolve_stream(stream, o_a, [kind_of(o_a)], torch_mode)
    export_stream = dlpack_stream(handle)
    views = {name: view(name, x, export_stream)
             for name, x in (("o_a", o_a), ("lse_a", lse_a), ("o_b", o_b), ("lse_b", lse_b))}
    av, bv = views["o_a"], views["o_b"]
    check_dims("o_a", av, 4, "[B, N, H, d]")
    if av.dtype not in _library.DTYPES:
        raise InvalidArgumentError(f"o_a has dtype {av.dtype}: flashrtc takes float16, bfloat16 and float32")
    if bv.shape != av.shape or bv.dtype != av.dtype:
        raise InvalidArgumentError(f"o_b is {bv.dtype} {bv.shape}, o_a {av.dtype} {av.shape}: they must match")
    batch, seqlen, heads, head_dim = av.shape
    lse_shape = (batch, heads, seqlen)
    check_lse("lse_a", views["lse_a"], lse_shape)
    check_lse("lse_b", views["lse_b"], lse_shape)
    allocation_stream = torch_stream(stream, handle, o_a) if torch_mode and stream is not None else None
    out, ov = allocate(out, "out", av.shape, av.dtype, o_a, torch_mode, allocation_stream, export_stream)
    if ov.shape != av.shape or ov.dtype != av.dtype:
        raise InvalidArgumentError(f"out is {ov.dtype} {ov.shape}, o_a {av.dtype} {av.shape}: they must match")
    lse, lv = allocate(lse_out, "lse_out", lse_shape, "float32", o_a, torch_mode, allocation_stream,
                        export_stream)
    check_lse("lse_out", lv, lse_shape)
    check_same_device(tuple({**views, "out": ov, "lse_out": lv}.items()))

    p = _library.load().new_optional_params(_library.MergeStatesParams, "flashrtc_merge_states")
    p.dtype = _library.DTYPES[av.dtype]
    p.batch, p.seqlen, p.heads, p.head_dim = batch, seqlen, heads, head_dim
    p.o_a, p.o_b, p.o = (tensor_struct(t, "bnhd") for t in (av, bv, ov))
    p.lse_a, p.lse_b, p.lse = views["lse_a"].ptr or None, views["lse_b"].ptr or None, lv.ptr or None
    p.stream = handle or None
    return KernelCall(p, out, lse, tuple(views.values()) + (ov, lv), av.device if torch_mode else None)


def launch_kvcache(call: KernelCall) -> None:
    """Calls flashrtc_attention_with_kvcache; raises the FlashrtcError of a failed status."""
    library = _library.load()
    launch_on_device(library, library.kvcache, call.params, call.torch_device)


def launch_merge(call: KernelCall) -> None:
    """Calls flashrtc_merge_states; raises the FlashrtcError of a failed status."""
    library = _library.load()
    launch_on_device(library, library.merge_states, call.params, call.torch_device)


def kvcache_for_operator(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
                         causal, num_splits):
    """(o, lse) for the operator's CUDA implementation (the lse always: its schema returns it)."""
    call = prepare_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                           cache_batch_idx=cache_batch_idx, block_table=block_table, softmax_scale=softmax_scale,
                           causal=causal, num_splits=num_splits, return_lse=True)
    launch_kvcache(call)
    return call.out, call.lse


def merge_for_operator(o_a, lse_a, o_b, lse_b):
    """(o, lse) for the merge operator's CUDA implementation."""
    call = prepare_merge(o_a, lse_a, o_b, lse_b)
    launch_merge(call)
    return call.out, call.lse

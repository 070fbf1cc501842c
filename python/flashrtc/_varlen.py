"""The variable-length forward: argument checks and marshalling into one flashrtc_attention_varlen_forward
call. prepare_varlen() checks everything and builds the C struct, allocating the outputs (torch only);
launch_varlen() calls the library. The public function (_attention_varlen) and the torch operator's CUDA
implementations (_torch_ops) come here; so does the backward (varlen_backward), the one place a varlen
backward entry point of the library is to be wired in.

The shapes are FlashAttention's flash_attn_varlen_func's (docs/varlen.md): q [total_q, Hq, d]; k, v
[total_k, Hkv, d]; cu_seqlens_q, cu_seqlens_k [B + 1] int32; seqused_k [B] int32; the lse [Hq, total_q]. The
library checks the strides, the alignment and the bounds (validate_varlen_forward); what is checked here is
what only Python sees (the shapes as tensors carry them, dtypes, devices, read-only buffers) and what a C field
could not hold. The values in cu_seqlens_* and seqused_k stay on the device: the kernel clamps them.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from . import _bounds, _library
from ._arguments import check_lse, check_same_device, scale_of, tile_of
from ._errors import InvalidArgumentError
from ._kvcache import allocate, causal_mask, check_dims, check_int32
from ._marshal import launch as launch_on_device, resolve_stream, tensor_struct, torch_stream
from ._streams import dlpack_stream
from ._tensors import KIND_TORCH, TensorView, kind_of, view


class VarlenCall(NamedTuple):
    """A checked call: the C struct, the outputs, and what keeps the inputs' memory alive until it returns."""
    params: object
    out: object
    lse: object
    views: tuple  # holds DLPack capsules
    torch_device: Optional[int]


PACKED_LSE = "[Hq, total_q]"  # the lse of a packed call: entry (h, t) at h * total_q + t


def max_seqlen(value, name: str) -> int:
    """A host bound of the sequences' lengths, as an int64 (the library checks its range against the totals)."""
    return _bounds.integer(value, name, _bounds.INT64_MIN, _bounds.INT64_MAX)


def _packed_struct(t: TensorView) -> _library.Tensor:
    """flashrtc_tensor of a packed [total, H, d] view: one batch, stride_batch unused."""
    return tensor_struct(t._replace(shape=(1,) + t.shape, strides=(0,) + t.strides), "bnhd")


def prepare_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, softmax_scale=None,
                   causal=False, seqused_k=None, return_lse=False, out=None, lse_out=None, stream=None,
                   config=None) -> VarlenCall:
    """Everything attention_varlen() does short of launching."""
    mask = causal_mask(causal)
    scale = scale_of(softmax_scale)
    tile = tile_of(config)
    bound_q, bound_k = max_seqlen(max_seqlen_q, "max_seqlen_q"), max_seqlen(max_seqlen_k, "max_seqlen_k")
    torch_mode = kind_of(q) == KIND_TORCH
    handle = resolve_stream(stream, q, [kind_of(q)], torch_mode)
    export_stream = dlpack_stream(handle)
    views = {name: view(name, x, export_stream) for name, x in (("q", q), ("k", k), ("v", v))}
    qv, kv, vv = views["q"], views["k"], views["v"]
    check_dims("q", qv, 3, "[total_q, Hq, d]")
    check_dims("k", kv, 3, "[total_k, Hkv, d]")
    check_dims("v", vv, 3, "[total_k, Hkv, d]")
    if qv.dtype not in _library.DTYPES:
        raise InvalidArgumentError(f"q has dtype {qv.dtype}: flashrtc takes float16, bfloat16 and float32")
    for name, t in views.items():
        if t.dtype != qv.dtype:
            raise InvalidArgumentError(f"{name} has dtype {t.dtype}, q has {qv.dtype}: they must match")
    total_q, heads_q, head_dim = qv.shape
    if kv.shape != vv.shape:
        raise InvalidArgumentError(f"k has shape {kv.shape} and v {vv.shape}: they must match")
    total_k, heads_kv, key_dim = kv.shape
    if key_dim != head_dim:
        raise InvalidArgumentError(f"k has head dim {key_dim}, q has {head_dim}: they must match")

    index_views = {"cu_seqlens_q": view("cu_seqlens_q", cu_seqlens_q, export_stream),
                   "cu_seqlens_k": view("cu_seqlens_k", cu_seqlens_k, export_stream)}
    cqv = index_views["cu_seqlens_q"]
    check_dims("cu_seqlens_q", cqv, 1, "[B + 1]")
    if cqv.shape[0] < 2:
        raise InvalidArgumentError(f"cu_seqlens_q has shape {cqv.shape}: expected [B + 1] with at least one "
                                   "sequence (B >= 1)")
    batch = cqv.shape[0] - 1
    check_int32("cu_seqlens_q", cqv, (batch + 1,), "[B + 1]")
    check_int32("cu_seqlens_k", index_views["cu_seqlens_k"], (batch + 1,), "[B + 1] (B of cu_seqlens_q)")
    if seqused_k is not None:
        index_views["seqused_k"] = view("seqused_k", seqused_k, export_stream)
        check_int32("seqused_k", index_views["seqused_k"], (batch,), "[B]")

    allocation_stream = torch_stream(stream, handle, q) if torch_mode and stream is not None else None
    out, ov = allocate(out, "out", (total_q, heads_q, head_dim), qv.dtype, q, torch_mode, allocation_stream,
                       export_stream)
    if ov.shape != qv.shape or ov.dtype != qv.dtype:
        raise InvalidArgumentError(f"out is {ov.dtype} {ov.shape}, q {qv.dtype} {qv.shape}: they must match")
    lse, lv = None, None
    if return_lse or lse_out is not None:
        lse, lv = allocate(lse_out, "lse_out", (heads_q, total_q), "float32", q, torch_mode, allocation_stream,
                           export_stream)
        check_lse("lse_out", lv, (heads_q, total_q), PACKED_LSE)
    outputs = {"out": ov, **({"lse_out": lv} if lv else {})}
    check_same_device(tuple({**views, **index_views, **outputs}.items()))

    p = _library.load().new_optional_params(_library.VarlenForwardParams, "flashrtc_attention_varlen_forward")
    p.dtype = _library.DTYPES[qv.dtype]
    p.batch, p.total_q, p.total_k = batch, total_q, total_k
    p.max_seqlen_q, p.max_seqlen_k = bound_q, bound_k
    p.heads_q, p.heads_kv, p.head_dim = heads_q, heads_kv, head_dim
    p.q, p.k, p.v, p.o = (_packed_struct(t) for t in (qv, kv, vv, ov))
    p.cu_seqlens_q = cqv.ptr or None
    p.cu_seqlens_k = index_views["cu_seqlens_k"].ptr or None
    if "seqused_k" in index_views:
        p.seqused_k = index_views["seqused_k"].ptr or None
    p.lse = lv.ptr if lv else None
    if scale is not None:
        p.softmax_scale, p.has_softmax_scale = scale, 1
    p.mask = mask
    p.block_m, p.block_n, p.warps, p.stages = tile
    p.stream = handle or None
    keep = tuple(views.values()) + tuple(index_views.values()) + tuple(outputs.values())
    return VarlenCall(p, out, lse, keep, qv.device if torch_mode else None)


def launch_varlen(call: VarlenCall) -> None:
    """Calls flashrtc_attention_varlen_forward; raises the FlashrtcError of a failed status."""
    library = _library.load()
    launch_on_device(library, library.varlen_forward, call.params, call.torch_device)


def varlen_for_operator(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                        seqused_k, tile, deterministic):
    """(o, lse) for the operator's CUDA implementation (the lse always: its schema returns it); tile: [] or
    (block_m, block_n, warps, stages); deterministic is the backward's."""
    call = prepare_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          softmax_scale=softmax_scale, causal=causal, seqused_k=seqused_k, return_lse=True,
                          config=tuple(tile) if tile else None)
    launch_varlen(call)
    return call.out, call.lse


def varlen_backward(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                    causal, seqused_k, deterministic):
    """(dq, dk, dv) of the varlen forward (torch tensors, as the backward operator's CUDA implementation gets
    them): one flashrtc_attention_varlen_backward call on the current stream. The gradients are
    allocated zeroed: the library writes the rows of the sequences only, and a row outside every sequence
    (past cu_seqlens[B]) had no effect on the output."""
    import torch
    library = _library.load()
    handle = torch.cuda.current_stream(q.device).cuda_stream
    export_stream = dlpack_stream(handle)
    inputs = {name: view(name, x, export_stream) for name, x in
              (("dout", dout), ("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse),
               ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k))}
    if seqused_k is not None:
        inputs["seqused_k"] = view("seqused_k", seqused_k, export_stream)
    qv, kv = inputs["q"], inputs["k"]
    total_q, heads_q, head_dim = qv.shape
    total_k, heads_kv, _ = kv.shape
    if inputs["dout"].shape != qv.shape or inputs["dout"].dtype != qv.dtype:
        raise InvalidArgumentError(f"dout is {inputs['dout'].dtype} {inputs['dout'].shape}, q {qv.dtype} "
                                   f"{qv.shape}: they must match")
    check_lse("lse", inputs["lse"], (heads_q, total_q), PACKED_LSE)
    grads = [torch.zeros_like(x, memory_format=torch.contiguous_format) for x in (q, k, v)]
    outputs = {name: view(name, g, export_stream) for name, g in zip(("dq", "dk", "dv"), grads)}
    check_same_device(tuple({**inputs, **outputs}.items()))

    p = library.new_optional_params(_library.VarlenBackwardParams, "flashrtc_attention_varlen_backward")
    p.dtype = _library.DTYPES[qv.dtype]
    p.batch = inputs["cu_seqlens_q"].shape[0] - 1
    p.total_q, p.total_k = total_q, total_k
    p.max_seqlen_q = max_seqlen(max_seqlen_q, "max_seqlen_q")
    p.max_seqlen_k = max_seqlen(max_seqlen_k, "max_seqlen_k")
    p.heads_q, p.heads_kv, p.head_dim = heads_q, heads_kv, head_dim
    p.q, p.k, p.v, p.o, p.d_o = (_packed_struct(inputs[n]) for n in ("q", "k", "v", "o", "dout"))
    p.d_q, p.d_k, p.d_v = (_packed_struct(outputs[n]) for n in ("dq", "dk", "dv"))
    p.lse = inputs["lse"].ptr or None
    p.cu_seqlens_q = inputs["cu_seqlens_q"].ptr or None
    p.cu_seqlens_k = inputs["cu_seqlens_k"].ptr or None
    if "seqused_k" in inputs:
        p.seqused_k = inputs["seqused_k"].ptr or None
    scale = scale_of(softmax_scale)
    if scale is not None:
        p.softmax_scale, p.has_softmax_scale = scale, 1
    p.mask = causal_mask(causal)
    p.deterministic = int(bool(deterministic))
    p.stream = handle or None
    launch_on_device(library, library.varlen_backward, p, qv.device)
    return tuple(grads)

"""flashrtc.attention_backward: argument checks and marshalling into one flashrtc_attention_backward call,
the gradients of a forward from its saved inputs, output and lse. Autograd reaches it through
backward_for_operator (the flashrtc::attention_backward operator's kernel, and eager autograd), which caches
the prepared struct per signature as the forward does; it is public for callers that keep their own tape.
"""
from __future__ import annotations

from typing import Optional

from . import _library, _torch_api
from ._arguments import CAUSAL_BY_MASK, check_flag, check_gqa, check_inputs, check_layout, check_lse, \
    check_same_device, mask_of, merge_causal, scale_of, tile_of
from ._errors import InvalidArgumentError
from ._marshal import BackwardCall, launch as launch_on_device, maybe_stream, resolve_stream, tensor_struct, \
    torch_stream
from ._signatures import BackwardSignature, backward_key, backward_signatures, remember
from ._streams import dlpack_stream
from ._tensors import KIND_TORCH, kind_of, view

_GRADIENTS = (("dq", "q"), ("dk", "k"), ("dv", "v"))  # each gradient and the input whose shape it has


def attention_backward(dout, q, k, v, o, lse, *, causal=None, is_causal: bool = False,
                       scale: Optional[float] = None, enable_gqa: Optional[bool] = None, layout: str = "bhnd",
                       deterministic: Optional[bool] = None, config=None, dq=None, dk=None, dv=None, stream=None):
    """Gradients (dq, dk, dv) of the loss, given dout = d loss / d o for o = attention(q, k, v, ...).

    q, k, v, o and lse are the forward's: its inputs, its output and its lse (return_lse=True or lse_out=);
    the mask (is_causal or causal, taken as attention() takes them), scale and layout must be the forward's
    too; enable_gqa as attention()'s. dout has o's shape and dtype (any valid strides). dq, dk, dv: where to
    write the gradients (shapes and dtypes of q, k, v); default torch.empty_like of each. dk and dv are
    summed over the query heads of a group (GQA). deterministic: True runs the main kernel (dk, dv) and an
    atomic-free dq pass: the same bits on every run. False runs, where a fused kernel serves the call (sm_90a,
    float16/bfloat16, d 64, 96 or 128; from 2048 keys, 4096 under a causal mask, or with its tile as config),
    one kernel that also adds dq into an fp32 workspace with atomics in
    no fixed order, so dq may differ in its last bits from run to run (elsewhere the same kernels as True).
    None (default) follows torch.are_deterministic_algorithms_enabled() as attention() does (False where
    torch is not imported). config: explicit tile of the main kernel (fused or not; a tile the fused kernel
    does not take runs the separate pass).

    The same tensor rules as attention() for every tensor; lse float32 [B, Hq, Nq], contiguous. Raises
    InvalidArgumentError naming the tensor whose shape, dtype, strides or device does not fit (nothing is
    launched, dq, dk, dv untouched), UnsupportedError when the loaded libflashrtc predates the backward,
    and the C API's errors as attention() does. Asynchronous; returns (dq, dk, dv).
    """
    call = prepare_backward(dout, q, k, v, o, lse, causal=merge_causal(causal, is_causal), scale=scale,
                            enable_gqa=enable_gqa, layout=layout, deterministic=deterministic, config=config,
                            dq=dq, dk=dk, dv=dv, stream=stream)
    launch_backward(call)
    return call.gradients


def prepare_backward(dout, q, k, v, o, lse, *, causal=False, scale=None, enable_gqa=None, layout="bhnd",
                     deterministic=False, config=None, dq=None, dk=None, dv=None, stream=None) -> BackwardCall:
    """Everything attention_backward() does short of launching: checks, outputs, the C struct."""
    if lse is None:
        raise InvalidArgumentError("lse is None: the backward needs the forward's log-sum-exp; run the forward "
                                   "with return_lse=True (or lse_out=) and pass its lse")
    check_layout(layout)
    check_flag(deterministic, "deterministic")
    if deterministic is None:
        deterministic = _torch_api.deterministic_default()
    mask = mask_of(causal)
    tile = tile_of(config)
    scale = scale_of(scale)

    inputs = {"q": q, "k": k, "v": v, "o": o, "dout": dout}
    kinds = [kind_of(x) for x in (q, k, v)]
    torch_mode = kinds[0] == KIND_TORCH
    handle = resolve_stream(stream, q, kinds, torch_mode)
    export_stream = dlpack_stream(handle)
    views = {name: view(name, x, export_stream) for name, x in inputs.items()}
    views["lse"] = view("lse", lse, export_stream)
    batch, seqlen_q, heads_q, head_dim, seqlen_kv, heads_kv = check_inputs(
        {name: views[name] for name in inputs}, layout)
    check_lse("lse", views["lse"], (batch, heads_q, seqlen_q))
    check_gqa(enable_gqa, heads_q, heads_kv)

    allocation_stream = torch_stream(stream, handle, q) if torch_mode and stream is not None else None
    given = {"dq": dq, "dk": dk, "dv": dv}
    gradients = []
    for name, like in _GRADIENTS:
        obj = given[name]
        if obj is None:
            if not torch_mode:
                raise InvalidArgumentError(f"q is a {kind_of(q)} object, not a torch tensor: pass dq=, dk= and dv=, "
                                           "flashrtc allocates only torch tensors")
            import torch
            with maybe_stream(torch, allocation_stream):
                obj = torch.empty_like(inputs[like])
        gv = view(name, obj, export_stream)
        lv = views[like]
        if gv.shape != lv.shape:
            raise InvalidArgumentError(f"{name} has shape {gv.shape}, {like} has {lv.shape}: they must match")
        if gv.dtype != lv.dtype:
            raise InvalidArgumentError(f"{name} has dtype {gv.dtype}, {like} has {lv.dtype}: they must match")
        if gv.readonly:
            raise InvalidArgumentError(f"{name} is read-only")
        views[name] = gv
        gradients.append(obj)
    check_same_device(tuple(views.items()))

    p = _library.load().new_backward_params()
    p.dtype = _library.DTYPES[views["q"].dtype]
    p.batch, p.seqlen_q, p.seqlen_kv = batch, seqlen_q, seqlen_kv
    p.heads_q, p.heads_kv, p.head_dim = heads_q, heads_kv, head_dim
    p.q, p.k, p.v, p.o, p.d_o = (tensor_struct(views[name], layout) for name in ("q", "k", "v", "o", "dout"))
    p.lse = views["lse"].ptr or None
    p.d_q, p.d_k, p.d_v = (tensor_struct(views[name], layout) for name in ("dq", "dk", "dv"))
    if scale is not None:
        p.softmax_scale, p.has_softmax_scale = scale, 1
    p.mask = mask
    p.deterministic = int(deterministic)
    p.stream = handle or None
    p.block_m, p.block_n, p.warps, p.stages = tile
    return BackwardCall(p, tuple(gradients), tuple(views.values()), views["q"].device if torch_mode else None)


def backward_for_operator(dout, q, k, v, o, lse, mask, scale, layout, deterministic):
    """(dq, dk, dv) of CUDA torch tensors for the backward operator's real implementation and eager
    autograd, allocated with torch.empty_like: a signature seen before (every tensor's shape, strides, dtype
    and device, and the options) fills its struct's pointers and stream; any other goes through
    attention_backward()'s checks."""
    key = backward_key(dout, q, k, v, o, lse, mask, scale, layout, deterministic)
    signature = backward_signatures.get(key)
    if signature is not None:
        return signature.run(dout, q, k, v, o, lse)
    torch = _torch_api.api()
    gradients = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    call = prepare_backward(dout, q, k, v, o, lse, causal=CAUSAL_BY_MASK[mask], scale=scale,
                            layout=layout, deterministic=deterministic, dq=gradients[0], dk=gradients[1],
                            dv=gradients[2])
    launch_backward(call)
    remember(backward_signatures, key, BackwardSignature(call))
    return gradients


def launch_backward(call: BackwardCall) -> None:
    """Calls the C API; raises the FlashrtcError subclass of a failed status with flashrtc's message."""
    library = _library.load()
    launch_on_device(library, library.backward, call.params, call.torch_device)

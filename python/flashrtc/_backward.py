"""flashrtc.attention_backward: argument checks and marshalling into one flashrtc_attention_backward call,
the gradients of a forward from its saved inputs, output and lse. Autograd reaches it through
backward_for_operator (the flashrtc::attention_backward operator's kernel, and eager autograd), which caches
the prepared struct per signature as the forward does; it is public for callers that keep their own tape.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from . import _attention, _library
from ._attention import _check_same_device, _mask, _maybe_stream, _resolve_stream, _scale, _tensor_struct, \
    _tile, _torch_stream, check_inputs, check_layout, check_lse
from ._errors import InvalidArgumentError
from ._streams import dlpack_stream
from ._tensors import KIND_TORCH, kind_of, view

_GRADIENTS = (("dq", "q"), ("dk", "k"), ("dv", "v"))  # each gradient and the input whose shape it has


def attention_backward(dout, q, k, v, o, lse, *, causal=False, scale: Optional[float] = None,
                       layout: str = "bhnd", deterministic: bool = False, config=None, dq=None, dk=None, dv=None,
                       stream=None):
    """Gradients (dq, dk, dv) of the loss, given dout = d loss / d o for o = attention(q, k, v, ...).

    q, k, v, o and lse are the forward's: its inputs, its output and its lse (return_lse=True or lse_out=);
    causal, scale and layout must be the forward's too. dout has o's shape and dtype (any valid strides).
    dq, dk, dv: where to write the gradients (shapes and dtypes of q, k, v); default torch.empty_like of
    each. dk and dv are summed over the query heads of a group (GQA). deterministic: the same bits on every
    run (no floating-point atomics; may be slower). config: explicit tile of the main kernel.

    The same tensor rules as attention() for every tensor; lse float32 [B, Hq, Nq], contiguous. Raises
    InvalidArgumentError naming the tensor whose shape, dtype, strides or device does not fit (nothing is
    launched, dq, dk, dv untouched), UnsupportedError when the loaded libflashrtc predates the backward,
    and the C API's errors as attention() does. Asynchronous; returns (dq, dk, dv).
    """
    call = prepare_backward(dout, q, k, v, o, lse, causal=causal, scale=scale, layout=layout,
                            deterministic=deterministic, config=config, dq=dq, dk=dk, dv=dv, stream=stream)
    launch_backward(call)
    return call.gradients


class BackwardCall(NamedTuple):
    params: _library.BackwardParams
    gradients: tuple  # (dq, dk, dv) as given or allocated
    views: tuple  # holds DLPack capsules
    torch_device: Optional[int]


def prepare_backward(dout, q, k, v, o, lse, *, causal=False, scale=None, layout="bhnd", deterministic=False,
                     config=None, dq=None, dk=None, dv=None, stream=None) -> BackwardCall:
    """Everything attention_backward() does short of launching: checks, outputs, the C struct."""
    if lse is None:
        raise InvalidArgumentError("lse is None: the backward needs the forward's log-sum-exp; run the forward "
                                   "with return_lse=True (or lse_out=) and pass its lse")
    check_layout(layout)
    if not isinstance(deterministic, bool):
        raise InvalidArgumentError(f"deterministic={deterministic!r}: must be True or False")
    mask = _mask(causal)
    tile = _tile(config)
    scale = _scale(scale)

    inputs = {"q": q, "k": k, "v": v, "o": o, "dout": dout}
    kinds = [kind_of(x) for x in (q, k, v)]
    torch_mode = kinds[0] == KIND_TORCH
    handle = _resolve_stream(stream, q, kinds, torch_mode)
    export_stream = dlpack_stream(handle)
    views = {name: view(name, x, export_stream) for name, x in inputs.items()}
    views["lse"] = view("lse", lse, export_stream)
    batch, seqlen_q, heads_q, head_dim, seqlen_kv, heads_kv = check_inputs(
        {name: views[name] for name in inputs}, layout)
    check_lse("lse", views["lse"], (batch, heads_q, seqlen_q))

    torch_stream = _torch_stream(stream, handle, q) if torch_mode and stream is not None else None
    given = {"dq": dq, "dk": dk, "dv": dv}
    gradients = []
    for name, like in _GRADIENTS:
        obj = given[name]
        if obj is None:
            if not torch_mode:
                raise InvalidArgumentError(f"q is a {kind_of(q)} object, not a torch tensor: pass dq=, dk= and dv=, "
                                           "flashrtc allocates only torch tensors")
            import torch
            with _maybe_stream(torch, torch_stream):
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
    _check_same_device(tuple(views.items()))

    p = _library.load().new_backward_params()
    p.dtype = _library.DTYPES[views["q"].dtype]
    p.batch, p.seqlen_q, p.seqlen_kv = batch, seqlen_q, seqlen_kv
    p.heads_q, p.heads_kv, p.head_dim = heads_q, heads_kv, head_dim
    p.q, p.k, p.v, p.o, p.d_o = (_tensor_struct(views[name], layout) for name in ("q", "k", "v", "o", "dout"))
    p.lse = views["lse"].ptr or None
    p.d_q, p.d_k, p.d_v = (_tensor_struct(views[name], layout) for name in ("dq", "dk", "dv"))
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
    key = (dout.shape, dout.stride(), dout.dtype, dout.get_device(), q.shape, q.stride(), q.dtype, q.get_device(),
           k.shape, k.stride(), k.dtype, k.get_device(), v.shape, v.stride(), v.dtype, v.get_device(),
           o.shape, o.stride(), o.dtype, o.get_device(), lse.shape, lse.stride(), lse.dtype, lse.get_device(),
           mask, scale, layout, deterministic)
    signature = _signatures.get(key)
    if signature is not None:
        return signature.run(dout, q, k, v, o, lse)
    torch = _attention._torch_api()
    gradients = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    call = prepare_backward(dout, q, k, v, o, lse, causal=_attention.CAUSAL_BY_MASK[mask], scale=scale,
                            layout=layout, deterministic=deterministic, dq=gradients[0], dk=gradients[1],
                            dv=gradients[2])
    launch_backward(call)
    if len(_signatures) >= _attention.MAX_SIGNATURES:
        _signatures.clear()
    _signatures[key] = _Signature(call)
    return gradients


class _Signature:
    """A prepared backward for one signature, as _attention._Signature is for the forward: a repeated call
    copies the struct and fills in the pointers (gradients allocated with empty_like, as the first call's
    were) and the current stream."""
    __slots__ = ("template", "copy", "torch", "library", "backward", "device")

    def __init__(self, call: BackwardCall):
        library = _library.load()
        self.template = call.params
        self.copy = type(call.params).from_buffer_copy
        self.torch = _attention._torch_api()
        self.library = library
        self.backward = library.backward
        self.device = call.torch_device

    def run(self, dout, q, k, v, o, lse):
        torch = self.torch
        empty_like = torch.empty_like
        dq, dk, dv = empty_like(q), empty_like(k), empty_like(v)
        p = self.copy(self.template)
        p.q.data = q.data_ptr()
        p.k.data = k.data_ptr()
        p.v.data = v.data_ptr()
        p.o.data = o.data_ptr()
        p.d_o.data = dout.data_ptr()
        p.lse = lse.data_ptr()
        p.d_q.data = dq.data_ptr()
        p.d_k.data = dk.data_ptr()
        p.d_v.data = dv.data_ptr()
        device = self.device
        p.stream = torch.current_raw_stream(device)
        if torch.current_device() != device:
            with torch.device_guard(device):
                status = self.backward(p)
        else:
            status = self.backward(p)
        if status != 0:
            _attention._checked(self.library, status)
        return dq, dk, dv


_signatures: dict = {}


def launch_backward(call: BackwardCall) -> None:
    """Calls the C API; raises the FlashrtcError subclass of a failed status with flashrtc's message."""
    library = _library.load()
    device = call.torch_device
    if device is not None:
        torch = _attention._torch_api()
        if torch.current_device() != device:
            with torch.device_guard(device):
                return _attention._checked(library, library.backward(call.params))
    _attention._checked(library, library.backward(call.params))

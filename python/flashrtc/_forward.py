"""One flashrtc_attention_forward call. prepare() checks everything and builds the C struct, allocating the
outputs flashrtc allocates (torch only); launch() calls the library. A torch call that flashrtc allocates for
on the current stream is remembered per signature (_signatures), so the next call of that signature skips
prepare(). flashrtc.attention (_attention) decides which calls come here.
"""
from __future__ import annotations

from typing import NamedTuple

from . import _library
from ._arguments import check_gqa, check_inputs, check_layout, check_lse, check_same_device, mask_of, scale_of, \
    tile_of
from ._errors import InvalidArgumentError
from ._marshal import ForwardCall, launch as launch_on_device, maybe_stream, resolve_stream, tensor_struct, \
    torch_stream
from ._signatures import ForwardSignature, forward_key, forward_signatures, remember
from ._streams import dlpack_stream
from ._tensors import KIND_TORCH, TensorView, kind_of, view


def prepare(q, k, v, *, causal=False, scale=None, enable_gqa=None, return_lse=False, layout="bhnd", config=None,
            out=None, lse_out=None, stream=None) -> ForwardCall:
    """Everything attention() does short of launching: checks, outputs, the C struct."""
    check_layout(layout)
    mask = mask_of(causal)
    tile = tile_of(config)
    scale = scale_of(scale)

    kinds = [kind_of(x) for x in (q, k, v)]
    torch_mode = kinds[0] == KIND_TORCH
    handle = resolve_stream(stream, q, kinds, torch_mode)
    export_stream = dlpack_stream(handle)
    qv, kv, vv = (view(name, x, export_stream) for name, x in (("q", q), ("k", k), ("v", v)))
    batch, seqlen_q, heads_q, head_dim, seqlen_kv, heads_kv = check_inputs({"q": qv, "k": kv, "v": vv}, layout)
    check_same_device((("q", qv), ("k", kv), ("v", vv)))
    check_gqa(enable_gqa, heads_q, heads_kv)

    allocation_stream = torch_stream(stream, handle, q) if torch_mode and stream is not None else None
    ov = _output_view(out, q, torch_mode, allocation_stream, export_stream)
    lse_wanted = return_lse or lse_out is not None
    lse_shape = (batch, heads_q, seqlen_q)
    lv = _lse_view(lse_out, lse_shape, q, torch_mode, allocation_stream, export_stream) if lse_wanted else None
    if ov.view.shape != qv.shape:
        raise InvalidArgumentError(f"out has shape {ov.view.shape}, q has {qv.shape}: they must match")
    if ov.view.dtype != qv.dtype:
        raise InvalidArgumentError(f"out has dtype {ov.view.dtype}, q has {qv.dtype}: they must match")
    if ov.view.readonly:
        raise InvalidArgumentError("out is read-only")
    check_same_device((("q", qv), ("out", ov.view)) + ((("lse_out", lv.view),) if lv else ()))

    p = _library.load().new_params()
    p.dtype = _library.DTYPES[qv.dtype]
    p.batch, p.seqlen_q, p.seqlen_kv = batch, seqlen_q, seqlen_kv
    p.heads_q, p.heads_kv, p.head_dim = heads_q, heads_kv, head_dim
    p.q, p.k, p.v, p.o = (tensor_struct(t, layout) for t in (qv, kv, vv, ov.view))
    p.lse = lv.view.ptr if lv else None
    if scale is not None:
        p.softmax_scale, p.has_softmax_scale = scale, 1
    p.mask = mask
    p.stream = handle or None
    p.block_m, p.block_n, p.warps, p.stages = tile
    views = (qv, kv, vv, ov.view) + ((lv.view,) if lv else ())
    return ForwardCall(p, ov.obj, lv.obj if lv else None, views, qv.device if torch_mode else None)


def launch(call: ForwardCall) -> None:
    """Calls the C API; raises the FlashrtcError subclass of a failed status with flashrtc's message."""
    library = _library.load()
    launch_on_device(library, library.forward, call.params, call.torch_device)


def launch_and_remember(key, q, k, v, **options):
    """prepare() and launch() with prepare()'s keyword options; with a key (a torch call's forward_key), the
    prepared struct is remembered under it. Returns o, or (o, lse) with return_lse."""
    return_lse = options["return_lse"]
    call = prepare(q, k, v, **options)
    launch(call)
    if key is not None:
        checked = (mask_of(options["causal"]), scale_of(options["scale"]), options["layout"])  # valid by now
        remember(forward_signatures, key, ForwardSignature(call, bool(return_lse), checked))
    return (call.out, call.lse) if return_lse else call.out


def forward_for_operator(q, k, v, causal, scale, layout, config):
    """(o, lse) of CUDA torch tensors for the operator's real implementation: the signature cache and the
    launch of attention(), without its autograd routing (the operator is autograd's business)."""
    key = forward_key(q, k, v, causal, scale, True, layout, None) if config is None else None
    signature = forward_signatures.get(key) if key is not None else None
    if signature is not None:
        return signature.run(q, k, v, None)
    return launch_and_remember(key, q, k, v, causal=causal, scale=scale, enable_gqa=None, return_lse=True,
                               layout=layout, config=config, out=None, lse_out=None, stream=None)


class _Output(NamedTuple):
    obj: object
    view: TensorView


def _output_view(given, q, torch_mode, allocation_stream, export_stream) -> _Output:
    if given is not None:
        return _Output(given, view("out", given, export_stream))
    if not torch_mode:
        raise InvalidArgumentError(f"q is a {kind_of(q)} object, not a torch tensor: pass out= (and lse_out= "
                                   "for the lse), flashrtc allocates only torch tensors")
    import torch
    with maybe_stream(torch, allocation_stream):
        o = torch.empty_like(q)  # q's strides when q is dense, so a transposed view gets its own layout back
    return _Output(o, view("out", o))


def _lse_view(given, shape, q, torch_mode, allocation_stream, export_stream) -> _Output:
    if given is None:
        if not torch_mode:
            raise InvalidArgumentError(f"q is a {kind_of(q)} object, not a torch tensor: pass lse_out= "
                                       f"(float32 {list(shape)}) for the lse")
        import torch
        with maybe_stream(torch, allocation_stream):
            given = torch.empty(shape, dtype=torch.float32, device=q.device)
    lv = view("lse_out", given, export_stream)
    check_lse("lse_out", lv, shape)
    if lv.readonly:
        raise InvalidArgumentError("lse_out is read-only")
    return _Output(given, lv)

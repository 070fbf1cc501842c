"""flashrtc.attention: argument checks and marshalling into one flashrtc_attention_forward call.

Two paths to the same struct. prepare() checks everything and builds it: every call of non-torch tensors, and
the first call of each torch signature. A torch call whose outputs flashrtc allocates on the current stream,
with a signature seen before (dtypes, shapes, strides, devices, options: everything the checks and the
struct depend on), copies that signature's struct and fills in only the pointers and the stream.

Calls that autograd or torch.compile must see (a torch tensor that requires grad with grad enabled, or any call
while compiling) go through _torch_ops instead: the torch.library operators while compiling, an eager
autograd function otherwise, whose forward comes back here (a signature seen with the lse skips the checks
there too).
"""
from __future__ import annotations

import math
import sys
from typing import NamedTuple, Optional

from . import _library
from ._errors import InvalidArgumentError, error_for_status
from ._streams import dlpack_stream, stream_handle
from ._tensors import KIND_CAI, KIND_TORCH, TensorView, _torch_types, cai_stream, kind_of, view

# Which dimension of a 4-d tensor is batch, sequence, head and head dim.
LAYOUTS = {"bhnd": (0, 2, 1, 3), "bnhd": (0, 1, 2, 3)}
_LAYOUT_TEXT = {"bhnd": "[B, H, N, d]", "bnhd": "[B, N, H, d]"}
# The canonical causal value of each mask (what the operators pass back here); True is "top-left" too.
CAUSAL_BY_MASK = {_library.MASK_NONE: False, _library.MASK_CAUSAL_TOP_LEFT: "top-left",
                  _library.MASK_CAUSAL_BOTTOM_RIGHT: "bottom-right"}
_CAUSAL = {**{causal: mask for mask, causal in CAUSAL_BY_MASK.items()}, True: _library.MASK_CAUSAL_TOP_LEFT}
# Each valid causal value's canonical one: the operators' signatures are cached under it (True: "top-left").
_CANONICAL_CAUSAL = {causal: CAUSAL_BY_MASK[mask] for causal, mask in _CAUSAL.items()}
_TILE_FIELDS = ("block_m", "block_n", "warps", "stages")
_FLOAT32_MAX = 3.4028234663852886e38
# Option types whose equal values mean the same call (True == 1 == 1.0 as dict keys: a float causal or a
# bool scale must not find the entry of a valid call).
_CAUSAL_KEY_TYPES = (bool, int, str)
_SCALE_KEY_TYPES = (type(None), float, int)
_FLAG_TYPES = (type(None), bool)  # enable_gqa, deterministic: None (the default) or a bool
MAX_SIGNATURES = 1024  # a bound on each signature cache, for callers with ever-changing shapes


def attention(q, k, v, *, causal=None, is_causal=None, scale: Optional[float] = None,
              enable_gqa: Optional[bool] = None, return_lse: bool = False, layout: str = "bhnd", config=None,
              out=None, lse_out=None, stream=None, deterministic: Optional[bool] = None):
    """Forward attention, o = softmax(scale * q k^T + mask) v, with fp32 accumulation; differentiable for
    torch tensors (autograd, torch.compile).

    q: [B, Hq, Nq, d]; k, v: [B, Hkv, Nk, d] (layout="bhnd", PyTorch SDPA's order; layout="bnhd" reads
    [B, N, H, d], FlashAttention's). Strides come from the tensors, so contiguous tensors, transposed views
    of the other order and padded views work without copies; the head dim must be contiguous and every
    other stride a multiple of 16 bytes. dtype float16, bfloat16 or float32, the same for q, k, v; d a
    multiple of 8 up to 256; Hq a multiple of Hkv (GQA, MQA); any Nq, Nk >= 1.

    Tensors: torch tensors, or objects with __cuda_array_interface__ or __dlpack__ (these need out=, and
    lse_out= for the lse: only torch can allocate them here).
    causal: False (default); True or "top-left" (key j visible to query i iff j <= i, SDPA's is_causal);
        "bottom-right" (j <= i + Nk - Nq, FlashAttention's). A query that sees no key gets 0 and lse -inf.
    is_causal: SDPA's name, True or False; give causal or is_causal, not both.
    scale: softmax scale (SDPA's name), default 1/sqrt(d); any finite value.
    enable_gqa: SDPA's flag. flashrtc always groups query heads over key/value heads; enable_gqa=False
        refuses Hq != Hkv as SDPA does.
    return_lse: also return the log-sum-exp, float32 [B, Hq, Nq], natural log (never differentiable).
    config: explicit tile (block_m, block_n, warps, stages), as a sequence, a mapping or an object with
        those attributes; default: flashrtc's table.
    out: where to write o (shape, dtype and device of q; any valid strides); default torch.empty_like(q).
    lse_out: where to write the lse (float32 [B, Hq, Nq], contiguous); implies it is computed.
    stream: CUstream handle or stream object; default: PyTorch's current stream on q's device for torch
        tensors, else the stream a __cuda_array_interface__ names, else the legacy default stream.
    deterministic: for the backward pass (autograd): the same gradient bits on every run; default
        torch.are_deterministic_algorithms_enabled(). The forward is deterministic anyway.

    Autograd: when grad is enabled and a torch tensor among q, k, v requires grad, the call runs as the
    operator flashrtc::attention_forward and loss.backward() computes dq, dk, dv with flashrtc's backward;
    under torch.compile every call is that operator. Both need q, k, v as torch tensors and take neither
    out=, lse_out= nor stream= (InvalidArgumentError): use torch.cuda.stream(...) for a stream.

    Asynchronous on that stream. Returns o, or (o, lse) with return_lse. Raises TypeError for objects that
    are not tensors, InvalidArgumentError (a ValueError) for wrong values, whichever side found them,
    LibraryNotFoundError when libflashrtc.so cannot be loaded, and the FlashrtcError subclass of the C
    API's status otherwise (NoDeviceError, NvrtcError with the compile log, DriverError, ...).
    """
    if _compiling():
        return _through_operator(q, k, v, merge_causal(causal, is_causal), scale, enable_gqa, return_lse, layout,
                                 config, out, lse_out, stream, deterministic, traced=True)
    if is_causal is None:
        if causal is None:
            causal = False
    else:
        causal = merge_causal(causal, is_causal)
    key = None
    if (lse_out is None and stream is None and config is None and _torch_types.get(type(q))
            and type(k) is type(q) and type(v) is type(q) and q.is_cuda and k.is_cuda and v.is_cuda
            and (out is None or type(out) is type(q) and out.is_cuda) and type(causal) in _CAUSAL_KEY_TYPES
            and type(scale) in _SCALE_KEY_TYPES and type(layout) is str and enable_gqa is not False
            and type(enable_gqa) in _FLAG_TYPES and type(deterministic) in _FLAG_TYPES):
        torch = _torch_api_cache[0] if _torch_api_cache else _torch_api()
        if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
            key = _signature_key(q, k, v, causal, scale, return_lse, layout, out)
            signature = _signatures.get(key)
            if signature is not None:
                return signature.run(q, k, v, out)
        elif out is None:  # autograd: a signature with the lse (the backward needs it) skips the checks too
            lse_key = _signature_key(q, k, v, _CANONICAL_CAUSAL.get(causal), scale, True, layout, None)
            signature = _signatures.get(lse_key)
            if signature is not None:
                return _torch_ops().eager_attention(signature, q, k, v, deterministic, return_lse)
    if _wants_grad(q, k, v):
        return _through_operator(q, k, v, causal, scale, enable_gqa, return_lse, layout, config, out, lse_out,
                                 stream, deterministic, traced=False)
    check_flag(deterministic, "deterministic")
    return _launch_and_remember(key, q, k, v, causal=causal, scale=scale, enable_gqa=enable_gqa,
                                return_lse=return_lse, layout=layout, config=config, out=out, lse_out=lse_out,
                                stream=stream)


def forward_for_operator(q, k, v, causal, scale, layout, config):
    """(o, lse) of CUDA torch tensors for the operator's real implementation: the signature cache and the
    launch of attention(), without its autograd routing (the operator is autograd's business)."""
    key = _signature_key(q, k, v, causal, scale, True, layout, None) if config is None else None
    signature = _signatures.get(key) if key is not None else None
    if signature is not None:
        return signature.run(q, k, v, None)
    return _launch_and_remember(key, q, k, v, causal=causal, scale=scale, enable_gqa=None, return_lse=True,
                                layout=layout, config=config, out=None, lse_out=None, stream=None)


def _signature_key(q, k, v, causal, scale, return_lse, layout, out) -> tuple:
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
            q.get_device(), k.get_device(), v.get_device(), causal, scale, bool(return_lse), layout,
            None if out is None else (out.shape, out.stride(), out.dtype, out.get_device()))


def _launch_and_remember(key, q, k, v, **options):
    return_lse = options["return_lse"]
    call = prepare(q, k, v, **options)
    launch(call)
    if key is not None:
        if len(_signatures) >= MAX_SIGNATURES:
            _signatures.clear()
        checked = (_mask(options["causal"]), _scale(options["scale"]), options["layout"])  # valid by now
        _signatures[key] = _Signature(call, bool(return_lse), checked)
    return (call.out, call.lse) if return_lse else call.out


def _compiling() -> bool:
    """Whether torch.compile is tracing this call (torch only looked up, never imported, here; a torch older
    than torch.compiler has no operator path)."""
    torch = sys.modules.get("torch")
    return torch is not None and hasattr(torch, "compiler") and torch.compiler.is_compiling()


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
    return bool(tensors) and _torch_api().is_grad_enabled() and any(t.requires_grad for t in tensors)


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


def merge_causal(causal, is_causal):
    """causal from causal= and SDPA's is_causal= (at most one given; neither: False)."""
    if is_causal is None:
        return False if causal is None else causal
    if causal is not None:
        raise InvalidArgumentError(f"causal={causal!r} and is_causal={is_causal!r}: give one of them (is_causal "
                                   "is SDPA's name for causal=True/False)")
    if not isinstance(is_causal, bool):
        raise InvalidArgumentError(f"is_causal={is_causal!r}: must be True or False (causal= also takes "
                                   "'bottom-right')")
    return is_causal


def check_layout(layout) -> None:
    if layout not in LAYOUTS:
        raise InvalidArgumentError(f"layout={layout!r}: must be 'bhnd' ([B, H, N, d]) or 'bnhd' ([B, N, H, d])")


def check_gqa(enable_gqa, heads_q, heads_kv) -> None:
    """SDPA's enable_gqa: None and True allow Hq != Hkv (flashrtc always groups); False refuses it."""
    check_flag(enable_gqa, "enable_gqa")
    if enable_gqa is False and heads_q != heads_kv:
        raise InvalidArgumentError(f"enable_gqa=False with {heads_q} query heads and {heads_kv} key/value heads: "
                                   "they must match, as in SDPA; pass enable_gqa=True (or leave it out) for "
                                   "grouped-query attention")


def check_flag(value, name) -> None:
    if type(value) not in _FLAG_TYPES:
        raise InvalidArgumentError(f"{name}={value!r}: must be True, False or None")


class Call(NamedTuple):
    """A checked call: the C struct and what keeps its memory alive until the launch returns."""
    params: _library.ForwardParams
    out: object
    lse: object
    views: tuple            # holds DLPack capsules
    torch_device: Optional[int]  # the device to make current for torch tensors


def prepare(q, k, v, *, causal=False, scale=None, enable_gqa=None, return_lse=False, layout="bhnd", config=None,
            out=None, lse_out=None, stream=None) -> Call:
    """Everything attention() does short of launching: checks, outputs, the C struct."""
    check_layout(layout)
    mask = _mask(causal)
    tile = _tile(config)
    scale = _scale(scale)

    kinds = [kind_of(x) for x in (q, k, v)]
    torch_mode = kinds[0] == KIND_TORCH
    handle = _resolve_stream(stream, q, kinds, torch_mode)
    export_stream = dlpack_stream(handle)
    qv, kv, vv = (view(name, x, export_stream) for name, x in (("q", q), ("k", k), ("v", v)))
    batch, seqlen_q, heads_q, head_dim, seqlen_kv, heads_kv = check_inputs({"q": qv, "k": kv, "v": vv}, layout)
    _check_same_device((("q", qv), ("k", kv), ("v", vv)))
    check_gqa(enable_gqa, heads_q, heads_kv)

    torch_stream = _torch_stream(stream, handle, q) if torch_mode and stream is not None else None
    ov = _output_view(out, q, torch_mode, torch_stream, export_stream)
    lse_wanted = return_lse or lse_out is not None
    lse_shape = (batch, heads_q, seqlen_q)
    lv = _lse_view(lse_out, lse_shape, q, torch_mode, torch_stream, export_stream) if lse_wanted else None
    if ov.view.shape != qv.shape:
        raise InvalidArgumentError(f"out has shape {ov.view.shape}, q has {qv.shape}: they must match")
    if ov.view.dtype != qv.dtype:
        raise InvalidArgumentError(f"out has dtype {ov.view.dtype}, q has {qv.dtype}: they must match")
    if ov.view.readonly:
        raise InvalidArgumentError("out is read-only")
    _check_same_device((("q", qv), ("out", ov.view)) + ((("lse_out", lv.view),) if lv else ()))

    p = _library.load().new_params()
    p.dtype = _library.DTYPES[qv.dtype]
    p.batch, p.seqlen_q, p.seqlen_kv = batch, seqlen_q, seqlen_kv
    p.heads_q, p.heads_kv, p.head_dim = heads_q, heads_kv, head_dim
    p.q, p.k, p.v, p.o = (_tensor_struct(t, layout) for t in (qv, kv, vv, ov.view))
    p.lse = lv.view.ptr if lv else None
    if scale is not None:
        p.softmax_scale, p.has_softmax_scale = scale, 1
    p.mask = mask
    p.stream = handle or None
    p.block_m, p.block_n, p.warps, p.stages = tile
    views = (qv, kv, vv, ov.view) + ((lv.view,) if lv else ())
    return Call(p, ov.obj, lv.obj if lv else None, views, qv.device if torch_mode else None)


def launch(call: Call) -> None:
    """Calls the C API; raises the FlashrtcError subclass of a failed status with flashrtc's message."""
    library = _library.load()
    device = call.torch_device
    if device is not None:
        torch = _torch_api()
        if torch.current_device() != device:
            with torch.device_guard(device):  # flashrtc launches in the current device's context
                return _checked(library, library.forward(call.params))
    _checked(library, library.forward(call.params))


def _checked(library, status: int) -> None:
    if status != 0:
        raise error_for_status(status, library.last_error().decode(errors="replace"))


class _TorchApi(NamedTuple):
    """The torch functions a call uses, looked up once (torch is imported by then: its tensors are here)."""
    empty_like: object
    empty: object
    float32: object
    is_grad_enabled: object
    current_device: object          # () -> index
    current_raw_stream: object      # (index) -> CUstream handle
    device_guard: object            # torch.cuda.device


_torch_api_cache: list = []


def _torch_api() -> _TorchApi:
    if _torch_api_cache:
        return _torch_api_cache[0]
    import torch  # only reached with torch tensors in hand
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # skips building a Stream object per call
    if raw is None:
        def raw(index):
            return torch.cuda.current_stream(index).cuda_stream
    api = _TorchApi(torch.empty_like, torch.empty, torch.float32, torch.is_grad_enabled,
                    getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device), raw, torch.cuda.device)
    _torch_api_cache.append(api)
    return api


class _Signature:
    """A prepared torch call for one signature: a repeated call copies its struct and fills in the pointers
    of its tensors (out's too, when given), of outputs allocated as the first call allocated them
    (empty_like(q) depends only on q's signature, so the strides in the struct stay right), and the current
    stream. checked: (mask, scale, layout), the call's options as the operators take them."""
    __slots__ = ("template", "copy", "torch", "library", "forward", "device", "lse_shape", "lse_device",
                 "return_lse", "checked")

    def __init__(self, call: Call, return_lse: bool, checked: tuple):
        library = _library.load()
        self.template = call.params
        self.copy = type(call.params).from_buffer_copy
        self.torch = _torch_api()
        self.library = library
        self.forward = library.forward
        self.device = call.torch_device
        self.lse_shape = tuple(call.lse.shape) if call.lse is not None else None
        self.lse_device = call.lse.device if call.lse is not None else None
        self.return_lse = return_lse
        self.checked = checked

    def run(self, q, k, v, out):
        torch = self.torch
        o = torch.empty_like(q) if out is None else out
        p = self.copy(self.template)
        p.q.data = q.data_ptr()
        p.k.data = k.data_ptr()
        p.v.data = v.data_ptr()
        p.o.data = o.data_ptr()
        lse = None
        if self.lse_shape is not None:
            lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.lse_device)
            p.lse = lse.data_ptr()
        device = self.device
        p.stream = torch.current_raw_stream(device)
        if torch.current_device() != device:
            with torch.device_guard(device):
                status = self.forward(p)
        else:
            status = self.forward(p)
        if status != 0:
            _checked(self.library, status)
        return (o, lse) if self.return_lse else o

    def forward_with_lse(self, q, k, v):
        """(o, lse) of a signature with the lse, for autograd's forward."""
        return self.run(q, k, v, None)


_signatures: dict = {}


def reset_caches() -> None:
    """Forgets the signatures, the backward's too, and the torch lookups (for tests that swap torch)."""
    from . import _backward
    _signatures.clear()
    _backward._signatures.clear()
    _torch_api_cache.clear()


def _mask(causal) -> int:
    key = None
    if isinstance(causal, str):
        key = causal
    elif isinstance(causal, int) and causal in (0, 1):  # bools, and 0 / 1
        key = bool(causal)
    if key not in _CAUSAL:
        raise InvalidArgumentError(f"causal={causal!r}: must be False, True (= 'top-left', SDPA's is_causal) "
                                   "or 'bottom-right'")
    return _CAUSAL[key]


def _tile(config) -> tuple:
    if config is None:
        return (0, 0, 0, 0)
    if isinstance(config, dict):
        missing = [f for f in _TILE_FIELDS if f not in config]
        if missing or len(config) != 4:
            raise InvalidArgumentError(f"config={config!r}: give exactly {', '.join(_TILE_FIELDS)}")
        values = tuple(config[f] for f in _TILE_FIELDS)
    elif all(hasattr(config, f) for f in _TILE_FIELDS):
        values = tuple(getattr(config, f) for f in _TILE_FIELDS)
    elif isinstance(config, (tuple, list)):
        if len(config) != 4:
            raise InvalidArgumentError(f"config={config!r}: give 4 values, ({', '.join(_TILE_FIELDS)})")
        values = tuple(config)
    else:
        raise TypeError(f"config: expected (block_m, block_n, warps, stages), a mapping or an object with those "
                        f"attributes, got {type(config).__qualname__}")
    for field, value in zip(_TILE_FIELDS, values):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value >= 2 ** 31:
            raise InvalidArgumentError(f"config: {field}={value!r} must be a positive integer")
    return values


def _scale(scale) -> Optional[float]:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) and not hasattr(scale, "__float__"):
        raise TypeError(f"scale: expected a number, got {type(scale).__qualname__}")
    try:
        value = float(scale)
    except OverflowError:  # an int beyond any float
        value = None
    if value is None or math.isfinite(value) and abs(value) > _FLOAT32_MAX:  # inf and NaN: the library names them
        raise InvalidArgumentError(f"scale={scale!r}: out of float32's range [-{_FLOAT32_MAX:g}, {_FLOAT32_MAX:g}]")
    return value


def _resolve_stream(stream, q, kinds, torch_mode) -> int:
    if stream is not None:
        return stream_handle(stream)
    if torch_mode and q.device.type == "cuda":  # a CPU q is reported by its view, with a clearer message
        return _torch_api().current_raw_stream(q.get_device())
    if kinds[0] == KIND_CAI:
        named = cai_stream("q", q)
        if named is not None:
            return named
    return 0


def _torch_stream(stream, handle, q):
    """The torch stream for an explicit stream, so torch's allocator ties the outputs to the stream that
    writes them."""
    import torch
    if isinstance(stream, torch.cuda.Stream):
        return stream
    if handle == 0:  # NULL, the legacy default stream: torch's default stream
        return torch.cuda.default_stream(q.device)
    return torch.cuda.ExternalStream(handle, device=q.device)


class _Output(NamedTuple):
    obj: object
    view: TensorView


def _output_view(given, q, torch_mode, torch_stream, export_stream) -> _Output:
    if given is not None:
        return _Output(given, view("out", given, export_stream))
    if not torch_mode:
        raise InvalidArgumentError(f"q is a {kind_of(q)} object, not a torch tensor: pass out= (and lse_out= "
                                   "for the lse), flashrtc allocates only torch tensors")
    import torch
    with _maybe_stream(torch, torch_stream):
        o = torch.empty_like(q)  # q's strides when q is dense, so a transposed view gets its own layout back
    return _Output(o, view("out", o))


def _lse_view(given, shape, q, torch_mode, torch_stream, export_stream) -> _Output:
    if given is None:
        if not torch_mode:
            raise InvalidArgumentError(f"q is a {kind_of(q)} object, not a torch tensor: pass lse_out= "
                                       f"(float32 {list(shape)}) for the lse")
        import torch
        with _maybe_stream(torch, torch_stream):
            given = torch.empty(shape, dtype=torch.float32, device=q.device)
    lv = view("lse_out", given, export_stream)
    check_lse("lse_out", lv, shape)
    if lv.readonly:
        raise InvalidArgumentError("lse_out is read-only")
    return _Output(given, lv)


def check_inputs(views: dict, layout: str) -> tuple:
    """The rules of q, k, v and any further tensors in views shaped like q (o, dout), forward and backward
    alike; returns (batch, seqlen_q, heads_q, head_dim, seqlen_kv, heads_kv)."""
    for name, t in views.items():
        if len(t.shape) != 4:
            raise InvalidArgumentError(f"{name} has shape {t.shape}: expected 4 dims, {_LAYOUT_TEXT[layout]} "
                                       f"(layout={layout!r})")
    qv, kv, vv = views["q"], views["k"], views["v"]
    if qv.dtype not in _library.DTYPES:
        raise InvalidArgumentError(f"q has dtype {qv.dtype}: flashrtc takes float16, bfloat16 and float32")
    for name, t in views.items():
        if t.dtype != qv.dtype:
            raise InvalidArgumentError(f"{name} has dtype {t.dtype}, q has {qv.dtype}: they must match")
    b, s, h, d = LAYOUTS[layout]
    batch, seqlen_q, heads_q, head_dim = (qv.shape[i] for i in (b, s, h, d))
    if kv.shape != vv.shape:
        raise InvalidArgumentError(f"k has shape {kv.shape} and v {vv.shape}: they must match")
    if kv.shape[b] != batch:
        raise InvalidArgumentError(f"k has batch {kv.shape[b]}, q has {batch}: they must match")
    if kv.shape[d] != head_dim:
        raise InvalidArgumentError(f"k has head dim {kv.shape[d]}, q has {head_dim}: they must match")
    for name, t in views.items():
        if name not in ("q", "k", "v") and t.shape != qv.shape:
            raise InvalidArgumentError(f"{name} has shape {t.shape}, q has {qv.shape}: they must match")
    return batch, seqlen_q, heads_q, head_dim, kv.shape[s], kv.shape[h]


def check_lse(name: str, lv: TensorView, shape: tuple) -> None:
    """The lse's rules: float32 [B, Hq, Nq], contiguous."""
    if lv.dtype != "float32":
        raise InvalidArgumentError(f"{name} has dtype {lv.dtype}: it must be float32")
    if lv.shape != shape:
        raise InvalidArgumentError(f"{name} has shape {lv.shape}: it must be [B, Hq, Nq] = {list(shape)}")
    expected = (shape[1] * shape[2], shape[2], 1)
    if any(n > 1 and st != e for n, st, e in zip(shape, lv.strides, expected)):
        raise InvalidArgumentError(f"{name} has strides {lv.strides}: it must be contiguous")


class _NoContext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _maybe_stream(torch, torch_stream):
    return torch.cuda.stream(torch_stream) if torch_stream is not None else _NoContext()


def _check_same_device(named_views) -> None:
    known = [(name, t.device) for name, t in named_views if t.device is not None]
    for name, device in known[1:]:
        if device != known[0][1]:
            raise InvalidArgumentError(f"{name} is on cuda:{device}, {known[0][0]} on cuda:{known[0][1]}: "
                                       "all tensors must be on one device")


def _tensor_struct(t: TensorView, layout: str) -> _library.Tensor:
    # A dimension of extent 1 is never stepped over, so its stride is free; torch gives such dimensions
    # arbitrary strides (e.g. after unsqueeze), which the library's 16-byte rule would reject for no reason.
    strides = [0 if n == 1 else st for n, st in zip(t.shape, t.strides)]
    b, s, h, d = LAYOUTS[layout]
    return _library.Tensor(t.ptr or None, strides[b], strides[s], strides[h], strides[d])

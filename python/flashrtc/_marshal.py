"""From checked arguments to what the C calls take, and back: a tensor's struct in a layout, the stream a
call runs on, the stream outputs are allocated on, a prepared call (the C struct and what keeps its memory
alive), and a launch whose failed status comes back as its FlashrtcError.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from . import _library, _torch_api
from ._arguments import LAYOUTS
from ._errors import error_for_status
from ._streams import stream_handle
from ._tensors import KIND_CAI, TensorView, cai_stream


class ForwardCall(NamedTuple):
    """A checked forward: the C struct and what keeps its memory alive until the launch returns."""
    params: _library.ForwardParams
    out: object
    lse: object
    views: tuple            # holds DLPack capsules
    torch_device: Optional[int]  # the device to make current for torch tensors


class BackwardCall(NamedTuple):
    """A checked backward, as ForwardCall."""
    params: _library.BackwardParams
    gradients: tuple  # (dq, dk, dv) as given or allocated
    views: tuple  # holds DLPack capsules
    torch_device: Optional[int]


def tensor_struct(t: TensorView, layout: str) -> _library.Tensor:
    """flashrtc_tensor of a view read in layout: [batch, seq, head, dim] strides in elements."""
    # A dimension of extent 1 is never stepped over, so its stride is free; torch gives such dimensions
    # arbitrary strides (e.g. after unsqueeze), which the library's 16-byte rule would reject for no reason.
    strides = [0 if n == 1 else st for n, st in zip(t.shape, t.strides)]
    b, s, h, d = LAYOUTS[layout]
    return _library.Tensor(t.ptr or None, strides[b], strides[s], strides[h], strides[d])


def resolve_stream(stream, q, kinds, torch_mode) -> int:
    """The CUstream of a call: stream= when given, else PyTorch's current stream on q's device for torch
    tensors, else the stream a __cuda_array_interface__ names, else 0 (the legacy default stream)."""
    if stream is not None:
        return stream_handle(stream)
    if torch_mode and q.device.type == "cuda":  # a CPU q is reported by its view, with a clearer message
        return _torch_api.api().current_raw_stream(q.get_device())
    if kinds[0] == KIND_CAI:
        named = cai_stream("q", q)
        if named is not None:
            return named
    return 0


def torch_stream(stream, handle, q):
    """The torch stream for an explicit stream, so torch's allocator ties the outputs to the stream that
    writes them."""
    import torch
    if isinstance(stream, torch.cuda.Stream):
        return stream
    if handle == 0:  # NULL, the legacy default stream: torch's default stream
        return torch.cuda.default_stream(q.device)
    return torch.cuda.ExternalStream(handle, device=q.device)


class _NoContext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def maybe_stream(torch, stream):
    """torch.cuda.stream(stream) for allocating outputs on it, or nothing for None (the current stream)."""
    return torch.cuda.stream(stream) if stream is not None else _NoContext()


def raise_for_status(library, status: int) -> None:
    """Nothing for status 0; else the FlashrtcError subclass of the status with the library's message."""
    if status != 0:
        raise error_for_status(status, library.last_error().decode(errors="replace"))


def launch(library, function, params, device: Optional[int]) -> None:
    """Calls function (the library's forward or backward) on params with device current (None: as it is);
    raises the FlashrtcError subclass of a failed status with flashrtc's message."""
    if device is not None:
        torch = _torch_api.api()
        if torch.current_device() != device:
            with torch.device_guard(device):  # flashrtc launches in the current device's context
                return raise_for_status(library, function(params))
    raise_for_status(library, function(params))

"""The signature caches of torch calls. A call's signature is everything the checks and the C struct depend
on (every tensor's shape, strides, dtype and device, and the options); a torch call whose signature was
checked before copies that signature's struct and fills in only the pointers and the stream, which costs a
fraction of the checks. Outputs are allocated as the first call allocated them (empty_like depends only on
the signature), so the strides in the struct stay right. One cache for the forward, one for the backward.
"""
from __future__ import annotations

from . import _library, _torch_api
from ._marshal import BackwardCall, ForwardCall, raise_for_status

MAX_SIGNATURES = 1024  # a bound on each cache, for callers with ever-changing shapes: full, it starts over

forward_signatures: dict = {}   # forward_key(...) -> ForwardSignature
backward_signatures: dict = {}  # backward_key(...) -> BackwardSignature


def forward_key(q, k, v, causal, scale, return_lse, layout, out) -> tuple:
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
            q.get_device(), k.get_device(), v.get_device(), causal, scale, bool(return_lse), layout,
            None if out is None else (out.shape, out.stride(), out.dtype, out.get_device()))


def backward_key(dout, q, k, v, o, lse, mask, scale, layout, deterministic) -> tuple:
    return (dout.shape, dout.stride(), dout.dtype, dout.get_device(), q.shape, q.stride(), q.dtype, q.get_device(),
            k.shape, k.stride(), k.dtype, k.get_device(), v.shape, v.stride(), v.dtype, v.get_device(),
            o.shape, o.stride(), o.dtype, o.get_device(), lse.shape, lse.stride(), lse.dtype, lse.get_device(),
            mask, scale, layout, deterministic)


def remember(cache: dict, key, signature) -> None:
    if len(cache) >= MAX_SIGNATURES:
        cache.clear()
    cache[key] = signature


def reset_caches() -> None:
    """Forgets both caches' signatures and the torch lookups they hold (for tests that swap torch)."""
    forward_signatures.clear()
    backward_signatures.clear()
    _torch_api.cache.clear()


class ForwardSignature:
    """A prepared forward for one signature: a repeated call copies its struct and fills in the pointers of
    its tensors (out's too, when given), of outputs allocated as the first call allocated them, and the
    current stream. checked: (mask, scale, layout), the call's options as the operators take them."""
    __slots__ = ("template", "copy", "torch", "library", "forward", "device", "lse_shape", "lse_device",
                 "return_lse", "checked")

    def __init__(self, call: ForwardCall, return_lse: bool, checked: tuple):
        library = _library.load()
        self.template = call.params
        self.copy = type(call.params).from_buffer_copy
        self.torch = _torch_api.api()
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
            raise_for_status(self.library, status)
        return (o, lse) if self.return_lse else o

    def forward_with_lse(self, q, k, v):
        """(o, lse) of a signature with the lse, for autograd's forward."""
        return self.run(q, k, v, None)


class BackwardSignature:
    """A prepared backward for one signature, as ForwardSignature: a repeated call copies the struct and
    fills in the pointers (gradients allocated with empty_like, as the first call's were) and the current
    stream."""
    __slots__ = ("template", "copy", "torch", "library", "backward", "device")

    def __init__(self, call: BackwardCall):
        library = _library.load()
        self.template = call.params
        self.copy = type(call.params).from_buffer_copy
        self.torch = _torch_api.api()
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
            raise_for_status(self.library, status)
        return dq, dk, dv

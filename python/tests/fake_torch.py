"""A stand-in for the few torch calls flashrtc's binding makes, for tests and measurements without torch
or a GPU: CUDA "tensors" with made-up, never dereferenced pointers, and a current stream per device.

    with installed() as torch:   # sys.modules["torch"] for the duration, flashrtc's torch lookups reset
        q = torch.tensor_bhnd((1, 1, 2, 64), "bfloat16")
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import types

_ITEM_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4}


class dtype:  # noqa: N801 (torch's spelling)
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


class device:  # noqa: N801
    def __init__(self, type_, index=None):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return f"device(type='{self.type}', index={self.index})"


class Tensor:
    """shape, stride(), dtype, device, data_ptr(): what the binding reads."""

    def __init__(self, shape, strides, dtype_, device_, ptr, requires_grad=False):
        self.shape, self._strides, self.dtype, self.device = tuple(shape), tuple(strides), dtype_, device_
        self._ptr, self.requires_grad = ptr, requires_grad

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return self.device.index if self.device.type == "cuda" else -1

    @property
    def is_cuda(self):
        return self.device.type == "cuda"


Tensor.__module__ = "torch"  # how flashrtc recognises torch tensors without importing torch


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def build():
    """A fresh module object named torch."""
    torch = types.ModuleType("torch")
    addresses = itertools.count(0x7F0000000000, 0x1000000)
    state = {"grad": True, "device": 0, "streams": {}, "allocations": 0, "compiling": False}
    torch.Tensor, torch.dtype, torch.device = Tensor, dtype, device
    for name in _ITEM_SIZES:
        setattr(torch, name, dtype(name))

    def empty(shape, dtype=None, device=None):
        state["allocations"] += 1
        shape = tuple(shape)
        return Tensor(shape, _contiguous_strides(shape), dtype, device, next(addresses))

    def full(shape, value, dtype=None, device=None):  # the value is not kept: nothing reads the data
        return empty(shape, dtype=dtype, device=device)

    def empty_like(t):
        state["allocations"] += 1
        return Tensor(t.shape, t.stride(), t.dtype, t.device, next(addresses))

    def tensor_bhnd(shape, dtype_name="bfloat16", index=0, device_type="cuda", strides=None, requires_grad=False):
        return Tensor(shape, strides or _contiguous_strides(shape), getattr(torch, dtype_name),
                      device(device_type, index), next(addresses), requires_grad)

    class Stream:  # torch.cuda.Stream; from a plain torch.Stream's fields, its handle is 0x5000 + stream_id
        def __init__(self, handle=None, stream_id=None, device_index=None, device_type=None):
            self.cuda_stream = handle if stream_id is None else 0x5000 + stream_id

    class PlainStream:  # torch.Stream: device-generic, no .cuda_stream
        def __init__(self, stream_id, index=0):
            self.stream_id, self.device_index, self.device_type = stream_id, index, 1
            self.device = device("cuda", index)

    PlainStream.__module__ = "torch"
    torch.Stream = PlainStream

    @contextlib.contextmanager
    def cuda_device(index):
        saved, state["device"] = state["device"], index
        try:
            yield
        finally:
            state["device"] = saved

    torch.empty, torch.empty_like, torch.tensor_bhnd, torch.state = empty, empty_like, tensor_bhnd, state
    torch.full = full
    torch.is_grad_enabled = lambda: state["grad"]
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: state["compiling"])
    torch.cuda = types.SimpleNamespace(
        Stream=Stream, device=cuda_device, current_device=lambda: state["device"],
        current_stream=lambda index=None: Stream(state["streams"].get(index, 0)))
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: state["streams"].get(index, 0),
                                     _cuda_getDevice=lambda: state["device"])
    return torch


@contextlib.contextmanager
def installed():
    """The fake as sys.modules["torch"], with flashrtc's cached torch lookups and signatures reset before
    and after."""
    from flashrtc import _signatures
    saved = sys.modules.get("torch")
    torch = build()
    sys.modules["torch"] = torch
    _signatures.reset_caches()
    try:
        yield torch
    finally:
        _signatures.reset_caches()
        if saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = saved

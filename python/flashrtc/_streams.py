"""CUDA stream handles from the objects Python libraries use for them."""
from __future__ import annotations

from . import _bounds
from ._errors import type_name

# The Driver API's and the array interfaces' spellings of the two default streams.
LEGACY_DEFAULT, PER_THREAD_DEFAULT = 1, 2


def stream_handle(stream) -> int:
    """The CUstream of an int handle, an object with __cuda_stream__ (the CUDA stream protocol), a
    torch.cuda.Stream (.cuda_stream), a plain torch.Stream on a CUDA device, a CuPy stream (.ptr) or an
    object with .handle. 0 and 1 are the legacy default stream, 2 the per-thread one. Raises TypeError for
    anything else and InvalidArgumentError for a handle outside [0, 2^64 - 1]."""
    if isinstance(stream, bool):
        raise TypeError("stream: expected a stream or an integer handle, got a bool")
    if isinstance(stream, int):
        return _bounds.pointer(stream, "stream")
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        answer = protocol()
        if not isinstance(answer, tuple) or len(answer) != 2:  # it may hold a handle: only its type is named
            what = (f"a tuple of {len(answer)} items" if isinstance(answer, tuple)
                    else f"a value of type {type_name(answer)}")
            raise TypeError(f"stream.__cuda_stream__() returned {what}: expected (version, handle)")
        return _bounds.pointer(answer[1], "stream.__cuda_stream__()[1]")
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return _bounds.pointer(value, f"stream.{attribute}")
    if _is_plain_torch_stream(stream):
        import torch  # present: stream is one of its objects
        cuda = torch.cuda.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                                 device_type=stream.device_type)
        return _bounds.pointer(cuda.cuda_stream, "stream (torch.Stream)")
    raise TypeError("stream: expected an integer CUstream handle or an object with __cuda_stream__, "
                    f".cuda_stream, .ptr or .handle, got {type(stream).__module__}.{type(stream).__qualname__}")


def _is_plain_torch_stream(stream) -> bool:
    """A device-generic torch.Stream (no .cuda_stream) on a CUDA device."""
    return (type(stream).__module__.startswith("torch") and hasattr(stream, "stream_id")
            and getattr(getattr(stream, "device", None), "type", None) == "cuda")


def dlpack_stream(handle: int) -> int:
    """What to pass to __dlpack__(stream=...) for work on handle: DLPack spells the legacy default 1, and
    0 (NULL) is the legacy default stream for the Driver API."""
    return LEGACY_DEFAULT if handle == 0 else handle

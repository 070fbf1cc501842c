"""CUDA stream handles from the objects Python libraries use for them."""
from __future__ import annotations

# The Driver API's and the array interfaces' spellings of the two default streams.
LEGACY_DEFAULT, PER_THREAD_DEFAULT = 1, 2


def stream_handle(stream) -> int:
    """The CUstream of an int handle, a torch.cuda.Stream (.cuda_stream), a CuPy stream (.ptr) or an
    object with .handle. 0 and 1 are the legacy default stream, 2 the per-thread one."""
    if isinstance(stream, bool):
        raise TypeError("stream: expected a stream or an integer handle, got a bool")
    if isinstance(stream, int):
        handle = stream
    else:
        for attribute in ("cuda_stream", "ptr", "handle"):
            value = getattr(stream, attribute, None)
            if isinstance(value, int) and not isinstance(value, bool):
                handle = value
                break
        else:
            raise TypeError("stream: expected an integer CUstream handle or an object with .cuda_stream, "
                            f".ptr or .handle, got {type(stream).__module__}.{type(stream).__qualname__}")
    if handle < 0:
        raise ValueError(f"stream: handle {handle} is negative")
    return handle


def dlpack_stream(handle: int) -> int:
    """What to pass to __dlpack__(stream=...) for work on handle: DLPack spells the legacy default 1, and
    0 (NULL) is the legacy default stream for the Driver API."""
    return LEGACY_DEFAULT if handle == 0 else handle

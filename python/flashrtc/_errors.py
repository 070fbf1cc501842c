"""Exceptions: one class per status of the C API, all under FlashrtcError.

Errors found in Python before anything reaches the library use the same classes (status None), so a caller
catches InvalidArgumentError whichever side noticed the mistake.
"""
from __future__ import annotations


class FlashrtcError(RuntimeError):
    """Base of every flashrtc error. `status` is the C API's status code (None when Python raised it),
    `status_name` its name ("InvalidArgument", ...), `message` flashrtc's own text."""

    status_name = "Error"

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.status = status


class InvalidArgumentError(FlashrtcError, ValueError):
    """A caller's value is wrong (shape, dtype, device, stride, alignment, option); nothing was launched."""
    status_name = "InvalidArgument"


class UnsupportedError(FlashrtcError):
    """A valid request that no kernel specialization serves (e.g. an explicit tile that does not fit)."""
    status_name = "Unsupported"


class NvrtcError(FlashrtcError):
    """NVRTC failed to compile a kernel; the message holds the compile log."""
    status_name = "NvrtcError"


class DriverError(FlashrtcError):
    """A CUDA Driver API call failed; the message names the call and its CUresult."""
    status_name = "DriverError"


class CacheIoError(FlashrtcError):
    """The disk cache could not be read or written where it had to be."""
    status_name = "CacheIoError"


class NoDeviceError(FlashrtcError):
    """No CUDA driver library, or no device."""
    status_name = "NoDevice"


class CompileDisallowedError(FlashrtcError):
    """FLASHRTC_REQUIRE_CACHED=1 and the kernel is not in the cache."""
    status_name = "CompileDisallowed"


class InternalError(FlashrtcError):
    """A broken invariant inside flashrtc."""
    status_name = "Internal"


class LibraryNotFoundError(FlashrtcError, OSError):
    """libflashrtc.so could not be found or loaded; the message lists every place that was tried."""
    status_name = "LibraryNotFound"


# flashrtc_status values (flashrtc/c_api.h).
BY_STATUS = {
    1: InvalidArgumentError,
    2: UnsupportedError,
    3: NvrtcError,
    4: DriverError,
    5: CacheIoError,
    6: NoDeviceError,
    7: CompileDisallowedError,
    8: InternalError,
}


def error_for_status(status: int, message: str) -> FlashrtcError:
    """The exception for a failed C call: its class by status, flashrtc's message as the text."""
    return BY_STATUS.get(status, InternalError)(message or f"flashrtc status {status}", status)


_SHOWN_INT_BITS = 128  # wider integers are named by size: their digits are noise (and past 4300, repr raises)
_SHOWN_CHARACTERS = 64
_SHOWN_ITEMS = 8


def shown(value, _nested: bool = False) -> str:
    """value as an error message may show it: the repr of None, a bool, a float, an integer of at most 128 bits
    or a string of at most 64 characters, and of a short tuple, list or dict of those; anything else only by
    its type ("<itertools.count object>"). A repr may be endless or hold memory addresses ("<object at
    0x...>"), and neither belongs in a message. Pointers and stream handles are never passed here."""
    if value is None or type(value) is bool:
        return repr(value)
    if isinstance(value, float):  # the base types' methods: a subclass's own repr or len could be anything
        return float.__repr__(value)
    if isinstance(value, int):
        if int.bit_length(value) <= _SHOWN_INT_BITS:
            return int.__repr__(value)
        return f"<an integer of {int.bit_length(value)} bits>"
    if isinstance(value, str):
        length = str.__len__(value)
        if length <= _SHOWN_CHARACTERS:
            return str.__repr__(value)
        return f"{str.__repr__(str.__getitem__(value, slice(_SHOWN_CHARACTERS)))}... ({length} characters)"
    if not _nested and type(value) in (tuple, list, dict) and len(value) <= _SHOWN_ITEMS:
        if type(value) is dict:
            return "{" + ", ".join(f"{shown(k, True)}: {shown(v, True)}" for k, v in value.items()) + "}"
        items = [shown(item, True) for item in value]
        if type(value) is list:
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return f"<{type_name(value)} object>"


def type_name(value) -> str:
    """The qualified name of value's type ("int", "itertools.count"), for messages that must not show it."""
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"

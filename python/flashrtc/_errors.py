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

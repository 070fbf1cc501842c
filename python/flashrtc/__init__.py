"""flashrtc: FlashAttention forward kernels compiled at run time with NVRTC, for torch tensors and anything
exposing __cuda_array_interface__ or DLPack. A thin ctypes layer over libflashrtc's C API; importing it
needs neither torch nor a GPU nor the library (loaded at the first call).

    import flashrtc
    o = flashrtc.attention(q, k, v, causal=True)               # q, k, v: [B, H, N, d], like SDPA
    o, lse = flashrtc.attention(q, k, v, return_lse=True)
"""
from ._attention import attention
from ._errors import (CacheIoError, CompileDisallowedError, DriverError, FlashrtcError, InternalError,
                      InvalidArgumentError, LibraryNotFoundError, NoDeviceError, NvrtcError, UnsupportedError)
from ._library import library_version, loaded_path

__version__ = "0.1.0"
__all__ = ["attention", "library_version", "loaded_path", "FlashrtcError", "InvalidArgumentError",
           "UnsupportedError", "NvrtcError", "DriverError", "CacheIoError", "NoDeviceError",
           "CompileDisallowedError", "InternalError", "LibraryNotFoundError"]

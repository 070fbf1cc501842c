"""flashrtc: FlashAttention kernels compiled at run time with NVRTC, for torch tensors and anything
exposing __cuda_array_interface__ or DLPack. A thin ctypes layer over libflashrtc's C API; importing it
needs neither torch nor a GPU nor the library (loaded at the first call). For torch tensors it is a
torch.library operator under autograd and torch.compile.

    import flashrtc
    o = flashrtc.attention(q, k, v, causal=True)               # q, k, v: [B, H, N, d], like SDPA
    o, lse = flashrtc.attention(q, k, v, return_lse=True)
    flashrtc.attention(q, k, v, is_causal=True).sum().backward()   # q.grad, k.grad, v.grad
"""
from ._attention import attention
from ._backward import attention_backward
from ._errors import (CacheIoError, CompileDisallowedError, DriverError, FlashrtcError, InternalError,
                      InvalidArgumentError, LibraryNotFoundError, NoDeviceError, NvrtcError, UnsupportedError)
from ._library import library_version, loaded_path

__version__ = "0.1.0"
__all__ = ["attention", "attention_backward", "library_version", "loaded_path", "FlashrtcError",
           "InvalidArgumentError", "UnsupportedError", "NvrtcError", "DriverError", "CacheIoError", "NoDeviceError",
           "CompileDisallowedError", "InternalError", "LibraryNotFoundError"]

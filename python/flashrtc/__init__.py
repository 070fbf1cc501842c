"""flashrtc: FlashAttention kernels compiled at run time with NVRTC, for torch tensors and anything
exposing __cuda_array_interface__ or DLPack. A thin ctypes layer over libflashrtc's C API; importing it
needs neither torch nor a GPU nor the library (loaded at the first call). For torch tensors it is a
torch.library operator under autograd and torch.compile.

    import flashrtc
    o = flashrtc.attention(q, k, v, causal=True)               # q, k, v: [B, H, N, d], like SDPA
    o, lse = flashrtc.attention(q, k, v, return_lse=True)
    o = flashrtc.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, causal=True)  # decode
    o = flashrtc.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k)  # packed sequences
    flashrtc.attention(q, k, v, is_causal=True).sum().backward()   # q.grad, k.grad, v.grad
"""
# The modules, each importing only modules above it (python/tests/test_imports_cpu.py checks it):
#   _errors       the exception classes, one per status of the C API
#   _library      finding and loading libflashrtc.so; the C API's structs and constants in ctypes
#   _bounds       range checks of the integers bound for C fields
#   _streams      CUstream handles from the stream objects of Python libraries
#   _tensors      what flashrtc reads of a torch, __cuda_array_interface__ or DLPack tensor
#   _torch_api    the torch functions the per-call paths use, looked up once (torch is optional)
#   _arguments    the options and tensor rules: causal as a mask, scale, tile, layout, SDPA's keywords
#   _marshal      views into C tensor structs, the call's stream, prepared calls, launches and their errors
#   _signatures   the forward's and the backward's prepared structs per torch signature
#   _forward      one flashrtc_attention_forward call: prepare() and launch()
#   _backward     attention_backward: one flashrtc_attention_backward call
#   _kvcache      one flashrtc_attention_with_kvcache or flashrtc_merge_states call: prepare and launch
#   _varlen       one flashrtc_attention_varlen_forward call: prepare and launch; the varlen backward's place
#   _torch_ops    the torch.library operators and eager autograd (imports torch: loaded at first need)
#   _attention    flashrtc.attention: a plain launch, or autograd's or torch.compile's operator
#   _decode       flashrtc.attention_with_kvcache and merge_states: a plain launch, or torch.compile's operator
#   _attention_varlen  flashrtc.attention_varlen: a plain launch, or autograd's or torch.compile's operator
#   transformers  flashrtc as a Hugging Face transformers attention implementation
from ._attention import attention
from ._attention_varlen import attention_varlen
from ._backward import attention_backward
from ._decode import attention_with_kvcache, merge_states
from ._errors import (CacheIoError, CompileDisallowedError, DriverError, FlashrtcError, InternalError,
                      InvalidArgumentError, LibraryNotFoundError, NoDeviceError, NvrtcError, UnsupportedError)
from ._library import library_version, loaded_path

__version__ = "0.1.0"
__all__ = ["attention", "attention_backward", "attention_varlen", "attention_with_kvcache", "merge_states",
           "library_version", "loaded_path", "FlashrtcError",
           "InvalidArgumentError", "UnsupportedError", "NvrtcError", "DriverError", "CacheIoError", "NoDeviceError",
           "CompileDisallowedError", "InternalError", "LibraryNotFoundError"]

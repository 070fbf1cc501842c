"""Finding and loading libflashrtc.so, and the C API's types (flashrtc/c_api.h) as ctypes declarations.

Nothing is loaded at import: the first call that needs the library loads it, so `import flashrtc` works on
any machine, and a missing library is an error at that call naming every place that was tried.
"""
from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from ._errors import LibraryNotFoundError, UnsupportedError

ENV_VARIABLE = "FLASHRTC_LIBRARY"
# The unversioned name is a development symlink; the soname is what an install or a staged copy has.
_FILE_NAMES = ("libflashrtc.so", "libflashrtc.so.0")
_SONAME = "libflashrtc.so.0"
_PACKAGE_DIR = Path(__file__).resolve().parent


class Tensor(ctypes.Structure):
    """flashrtc_tensor: [batch, seq, head, dim] with element strides."""
    _fields_ = [("data", ctypes.c_void_p), ("stride_batch", ctypes.c_int64), ("stride_seq", ctypes.c_int64),
                ("stride_head", ctypes.c_int64), ("stride_dim", ctypes.c_int64)]


class ForwardParams(ctypes.Structure):
    """flashrtc_forward_params, the layout this binding was written for (struct_size says so to the library,
    which defaults any later field); ctypes applies the C layout rules, and the tests pin size and offsets on
    both sides (tests/cpu/test_c_api.cpp and python/tests)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("dtype", ctypes.c_int32),
                ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64), ("seqlen_kv", ctypes.c_int64),
                ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
                ("lse", ctypes.c_void_p),
                ("softmax_scale", ctypes.c_float), ("has_softmax_scale", ctypes.c_int32),
                ("mask", ctypes.c_int32),
                ("block_m", ctypes.c_int32), ("block_n", ctypes.c_int32), ("warps", ctypes.c_int32),
                ("stages", ctypes.c_int32),
                ("stream", ctypes.c_void_p)]


class BackwardParams(ctypes.Structure):
    """flashrtc_backward_params, grown like ForwardParams (struct_size says which layout the caller knows)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("dtype", ctypes.c_int32),
                ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64), ("seqlen_kv", ctypes.c_int64),
                ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("d_o", Tensor),
                ("lse", ctypes.c_void_p),
                ("d_q", Tensor), ("d_k", Tensor), ("d_v", Tensor),
                ("softmax_scale", ctypes.c_float), ("has_softmax_scale", ctypes.c_int32),
                ("mask", ctypes.c_int32), ("deterministic", ctypes.c_int32),
                ("block_m", ctypes.c_int32), ("block_n", ctypes.c_int32), ("warps", ctypes.c_int32),
                ("stages", ctypes.c_int32),
                ("stream", ctypes.c_void_p)]


class KvCacheParams(ctypes.Structure):
    """flashrtc_kvcache_params (attention over a KV cache), grown like ForwardParams."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("dtype", ctypes.c_int32),
                ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64), ("heads_q", ctypes.c_int64),
                ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q", Tensor), ("k_cache", Tensor), ("v_cache", Tensor),
                ("num_pages", ctypes.c_int64), ("page_size", ctypes.c_int64),
                ("block_table", ctypes.c_void_p), ("block_table_stride", ctypes.c_int64),
                ("max_pages_per_seq", ctypes.c_int64),
                ("cache_seqlens", ctypes.c_void_p), ("cache_batch_idx", ctypes.c_void_p),
                ("k_new", Tensor), ("v_new", Tensor), ("seqlen_new", ctypes.c_int64),
                ("o", Tensor), ("lse", ctypes.c_void_p),
                ("softmax_scale", ctypes.c_float), ("has_softmax_scale", ctypes.c_int32),
                ("mask", ctypes.c_int32), ("num_splits", ctypes.c_int32),
                ("block_m", ctypes.c_int32), ("block_n", ctypes.c_int32), ("warps", ctypes.c_int32),
                ("stages", ctypes.c_int32),
                ("stream", ctypes.c_void_p)]


class MergeStatesParams(ctypes.Structure):
    """flashrtc_merge_states_params, grown like ForwardParams."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("dtype", ctypes.c_int32),
                ("batch", ctypes.c_int64), ("seqlen", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("head_dim", ctypes.c_int64),
                ("o_a", Tensor), ("o_b", Tensor), ("lse_a", ctypes.c_void_p), ("lse_b", ctypes.c_void_p),
                ("o", Tensor), ("lse", ctypes.c_void_p), ("stream", ctypes.c_void_p)]


class VarlenForwardParams(ctypes.Structure):
    """flashrtc_varlen_forward_params (packed sequences of their own lengths), grown like ForwardParams."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("dtype", ctypes.c_int32),
                ("batch", ctypes.c_int64), ("total_q", ctypes.c_int64), ("total_k", ctypes.c_int64),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64),
                ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("seqused_k", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("softmax_scale", ctypes.c_float), ("has_softmax_scale", ctypes.c_int32),
                ("mask", ctypes.c_int32),
                ("block_m", ctypes.c_int32), ("block_n", ctypes.c_int32), ("warps", ctypes.c_int32),
                ("stages", ctypes.c_int32),
                ("stream", ctypes.c_void_p)]


class Variants(ctypes.Structure):
    """flashrtc_variants (attention variants; all zero: none). The binding sets none yet."""
    _fields_ = [("has_window", ctypes.c_int32), ("softcap", ctypes.c_float),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
                ("alibi_slopes", ctypes.c_void_p), ("alibi_stride_batch", ctypes.c_int64),
                ("sinks", ctypes.c_void_p)]


class VarlenBackwardParams(ctypes.Structure):
    """flashrtc_varlen_backward_params (the gradients of the packed forward), grown like ForwardParams."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("dtype", ctypes.c_int32),
                ("batch", ctypes.c_int64), ("total_q", ctypes.c_int64), ("total_k", ctypes.c_int64),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64),
                ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("d_o", Tensor),
                ("lse", ctypes.c_void_p), ("d_q", Tensor), ("d_k", Tensor), ("d_v", Tensor),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("seqused_k", ctypes.c_void_p),
                ("softmax_scale", ctypes.c_float), ("has_softmax_scale", ctypes.c_int32),
                ("mask", ctypes.c_int32),
                ("block_m", ctypes.c_int32), ("block_n", ctypes.c_int32), ("warps", ctypes.c_int32),
                ("stages", ctypes.c_int32),
                ("stream", ctypes.c_void_p),
                ("variants", Variants), ("d_sinks", ctypes.c_void_p),
                ("deterministic", ctypes.c_int32)]


# flashrtc_dtype and flashrtc_mask.
DTYPES = {"float32": 0, "float16": 1, "bfloat16": 2}
MASK_NONE, MASK_CAUSAL_TOP_LEFT, MASK_CAUSAL_BOTTOM_RIGHT = 0, 1, 2


def candidate_paths() -> list:
    """Where the library is looked for, in order: $FLASHRTC_LIBRARY (alone, when set); the package
    directory (where a wheel puts it); the directory holding the package (a staged .devbuild/); the build
    folder of the checkout the package sits in (<repo>/build/runtime, only from a checkout); then the soname
    for the system loader (LD_LIBRARY_PATH, ldconfig)."""
    explicit = os.environ.get(ENV_VARIABLE)
    if explicit:
        return [explicit]  # an explicit choice is never silently replaced by another copy
    folders = [_PACKAGE_DIR, _PACKAGE_DIR.parent]
    checkout = _PACKAGE_DIR.parent.parent
    if (checkout / "runtime" / "CMakeLists.txt").is_file():
        folders.append(checkout / "build" / "runtime")
    return [str(folder / name) for folder in folders for name in _FILE_NAMES] + [_SONAME]


class Library:
    """The loaded library with its function prototypes."""

    def __init__(self, path: str, cdll: ctypes.CDLL):
        self.path = path
        self.cdll = cdll
        params = ctypes.POINTER(ForwardParams)
        if not hasattr(cdll, "flashrtc_forward_params_init_sized") and hasattr(cdll, "flashrtc_attention_forward"):
            raise AttributeError("an older flashrtc, built before the sized params struct "
                                 "(flashrtc_forward_params_init_sized); rebuild it")
        self.forward = self._function("flashrtc_attention_forward", ctypes.c_int, [params])
        params_init = self._function("flashrtc_forward_params_init_sized", None, [params, ctypes.c_uint32])
        self._defaults = ForwardParams()
        params_init(self._defaults, ctypes.sizeof(ForwardParams))
        # The backward entry points are optional, so a library built before them still serves the forward;
        # new_backward_params() says what is missing when a backward is asked for.
        self.backward = None
        self._backward_defaults = None
        if hasattr(cdll, "flashrtc_attention_backward") and hasattr(cdll, "flashrtc_backward_params_init_sized"):
            backward_params = ctypes.POINTER(BackwardParams)
            self.backward = self._function("flashrtc_attention_backward", ctypes.c_int, [backward_params])
            backward_init = self._function("flashrtc_backward_params_init_sized", None,
                                           [backward_params, ctypes.c_uint32])
            self._backward_defaults = BackwardParams()
            backward_init(self._backward_defaults, ctypes.sizeof(BackwardParams))
        # The KV-cache and varlen entry points are optional too (a library built before them serves the rest).
        self.kvcache = self.merge_states = self.varlen_forward = self.varlen_backward = None
        self._optional_defaults = {}
        for struct, init, run, attribute in (
                (KvCacheParams, "flashrtc_kvcache_params_init_sized", "flashrtc_attention_with_kvcache", "kvcache"),
                (MergeStatesParams, "flashrtc_merge_states_params_init_sized", "flashrtc_merge_states",
                 "merge_states"),
                (VarlenForwardParams, "flashrtc_varlen_forward_params_init_sized",
                 "flashrtc_attention_varlen_forward", "varlen_forward"),
                (VarlenBackwardParams, "flashrtc_varlen_backward_params_init_sized",
                 "flashrtc_attention_varlen_backward", "varlen_backward")):
            if hasattr(cdll, init) and hasattr(cdll, run):
                pointer = ctypes.POINTER(struct)
                setattr(self, attribute, self._function(run, ctypes.c_int, [pointer]))
                defaults = struct()
                self._function(init, None, [pointer, ctypes.c_uint32])(defaults, ctypes.sizeof(struct))
                self._optional_defaults[struct] = defaults
        self.last_error = self._function("flashrtc_last_error", ctypes.c_char_p, [])
        self.status_name = self._function("flashrtc_status_name", ctypes.c_char_p, [ctypes.c_int])
        self.version = self._function("flashrtc_version", ctypes.c_char_p, [])

    def new_params(self) -> ForwardParams:
        """A struct with the library's defaults for this binding's layout."""
        return ForwardParams.from_buffer_copy(self._defaults)

    def new_backward_params(self) -> BackwardParams:
        """A backward struct with the library's defaults; UnsupportedError for a library without the backward
        pass (built before it)."""
        if self._backward_defaults is None:
            raise UnsupportedError(f"flashrtc: {self.path} has no backward pass (flashrtc_attention_backward "
                                   "is missing): it was built before the backward existed; rebuild it")
        return BackwardParams.from_buffer_copy(self._backward_defaults)

    def new_optional_params(self, struct, entry_point: str):
        """A KvCacheParams, MergeStatesParams, VarlenForwardParams or VarlenBackwardParams with the library's
        defaults; UnsupportedError for a library built before entry_point existed."""
        defaults = self._optional_defaults.get(struct)
        if defaults is None:
            raise UnsupportedError(f"flashrtc: {self.path} has no {entry_point}: it was built before that entry "
                                   "point existed; rebuild it")
        return struct.from_buffer_copy(defaults)

    def _function(self, name, restype, argtypes):
        function = getattr(self.cdll, name)
        function.restype = restype
        function.argtypes = argtypes
        return function


_lock = threading.Lock()
_loaded: Library | None = None


def load() -> Library:
    """The library, loaded on first use from the first candidate that loads. Raises LibraryNotFoundError
    listing each candidate and why it failed; a later call tries again (the environment may have changed)."""
    global _loaded
    loaded = _loaded  # once loaded, never replaced: no lock on the per-call path
    if loaded is not None:
        return loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        failures = []
        for candidate in candidate_paths():
            is_path = os.sep in candidate
            if is_path and not os.path.exists(candidate):
                failures.append(f"  {candidate}: no such file")
                continue
            try:
                cdll = ctypes.CDLL(candidate)
            except OSError as e:  # exists but does not load (e.g. NVRTC not found): that reason matters most
                failures.append(f"  {candidate}: {e}")
                continue
            try:
                _loaded = Library(candidate, cdll)
            except AttributeError as e:
                failures.append(f"  {candidate}: not a usable flashrtc library ({e})")
                continue
            return _loaded
        raise LibraryNotFoundError(
            "flashrtc: cannot load libflashrtc.so. Build it (`make build`, or cmake) and point "
            f"{ENV_VARIABLE} at it, or put it next to the flashrtc package or on LD_LIBRARY_PATH. Tried:\n"
            + "\n".join(failures))


def loaded_path() -> str:
    """Path of the library that calls use (loads it if needed)."""
    return load().path


def library_version() -> str:
    """Version string of the loaded C library, e.g. "0.1.0"."""
    return load().version().decode()

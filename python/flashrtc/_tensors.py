"""What flashrtc needs to know of a tensor (pointer, shape, element strides, dtype, device), read from a
torch tensor, __cuda_array_interface__ (v2/v3) or DLPack, without importing torch or numpy.

A producer is not trusted: its shape and strides are read at most _bounds.MAX_RANK + 1 entries deep, a DLPack
ndim is checked before the arrays it sizes are read, and no message shows a pointer or a value's repr (see
_errors.shown). What cannot be checked is that a pointer points at memory of the size the shape and strides
describe, or that a DLPack shape array really has ndim entries.
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple, Optional, Tuple

from . import _bounds
from ._errors import InvalidArgumentError, shown, type_name

KIND_TORCH, KIND_CAI, KIND_DLPACK = "torch", "__cuda_array_interface__", "DLPack"


class TensorView(NamedTuple):
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]      # in elements
    dtype: str                    # "float32", "float16", "bfloat16", or another name for the error message
    device: Optional[int]         # CUDA ordinal; None when the interface does not tell (CAI)
    kind: str
    readonly: bool = False
    keepalive: object = None      # the DLPack capsule, held until the call returns


def is_torch_tensor_type(cls: type) -> bool:
    """torch.Tensor or a subclass, recognised without importing torch."""
    return any(c.__name__ == "Tensor" and c.__module__ == "torch" for c in cls.__mro__)


torch_types: dict = {}  # type -> whether it is a torch tensor type (the MRO walk, once per type)


def kind_of(x) -> Optional[str]:
    cls = type(x)
    torch_type = torch_types.get(cls)
    if torch_type is None:
        torch_type = torch_types.setdefault(cls, is_torch_tensor_type(cls))
    if torch_type:
        return KIND_TORCH
    if hasattr(x, "__cuda_array_interface__"):
        return KIND_CAI
    if hasattr(x, "__dlpack__"):
        return KIND_DLPACK
    return None


def view(name: str, x, dlpack_stream: Optional[int] = None) -> TensorView:
    """The view of x, or TypeError when x is no tensor flashrtc can read, InvalidArgumentError when it
    is one that is not on a CUDA device."""
    kind = kind_of(x)
    if kind == KIND_TORCH:
        return _from_torch(name, x)
    if kind == KIND_CAI:
        return _from_cai(name, x)
    if kind == KIND_DLPACK:
        return _from_dlpack(name, x, dlpack_stream)
    raise TypeError(f"{name}: expected a torch tensor or an object with __cuda_array_interface__ or "
                    f"__dlpack__, got {type(x).__module__}.{type(x).__qualname__}")


def not_on_cuda(name: str, device) -> InvalidArgumentError:
    """The error for a torch tensor on another device than CUDA, whichever path finds it."""
    return InvalidArgumentError(f"{name} is on {device}: flashrtc needs CUDA tensors")


def _from_torch(name, t) -> TensorView:
    if t.device.type != "cuda":
        raise not_on_cuda(name, t.device)
    return TensorView(t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype).replace("torch.", ""),
                      t.device.index, KIND_TORCH)


# Array-interface type strings; bfloat16 has none, so it comes through torch or DLPack only.
_TYPESTR = {"<f4": "float32", "<f2": "float16", "<i4": "int32"}  # int32: a KV cache's lengths and tables


def _from_cai(name, x) -> TensorView:
    cai = _cai_dict(name, x)
    shape = _bounds.shape(cai.get("shape"), f"{name}.shape")
    typestr = cai.get("typestr")
    if type(typestr) is not str:
        raise InvalidArgumentError(f"{name}: __cuda_array_interface__ typestr={shown(typestr)} is not a string")
    dtype = _TYPESTR.get(typestr, f"typestr {shown(typestr)}")
    # The byte strides' divisor; an unknown dtype is refused after the strides are read, so any size >= 1 serves.
    itemsize = max(int(typestr[2:]), 1) if len(typestr) < 8 and typestr[2:].isdigit() else 1
    if cai.get("mask") is not None:
        raise InvalidArgumentError(f"{name}: masked arrays are not supported")
    data = cai.get("data")
    if type(data) not in (tuple, list) or len(data) != 2:  # its value may be a pointer: only its type is named
        what = f"a {type(data).__name__} of {len(data)} items" if type(data) in (tuple, list) else \
            f"of type {type_name(data)}"
        raise InvalidArgumentError(f"{name}: __cuda_array_interface__ data is {what}: expected (pointer, "
                                   "read-only flag)")
    ptr = _bounds.pointer(data[0] or 0, f"{name}.data")
    if cai.get("strides") is None:
        strides = _row_major(name, shape)
    else:
        byte_strides = _bounds.strides(cai["strides"], f"{name}.strides", len(shape))
        if any(s % itemsize for s in byte_strides):
            raise InvalidArgumentError(f"{name}: byte strides {byte_strides} are not multiples of the "
                                       f"element size {itemsize}")
        strides = tuple(s // itemsize for s in byte_strides)
    return TensorView(ptr, shape, strides, dtype, None, KIND_CAI, bool(data[1]))


def _cai_dict(name, x) -> dict:
    cai = x.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise InvalidArgumentError(f"{name}: __cuda_array_interface__ is a {type(cai).__qualname__}, not a dict")
    return cai


def cai_stream(name, x) -> Optional[int]:
    """The stream a v3 __cuda_array_interface__ says its data is ready on, else None."""
    stream = _cai_dict(name, x).get("stream")
    return None if stream is None else _bounds.pointer(stream, f"{name}.__cuda_array_interface__['stream']")


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLTensor, the head of DLManagedTensor (the unversioned "dltensor" capsule)."""
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DL_CPU, DL_CUDA, DL_CUDA_MANAGED = 1, 2, 13
_DL_INT, _DL_FLOAT, _DL_BFLOAT = 0, 2, 4
_DL_DTYPES = {(_DL_FLOAT, 32): "float32", (_DL_FLOAT, 16): "float16", (_DL_BFLOAT, 16): "bfloat16",
              (_DL_INT, 32): "int32"}

_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(name, x, stream) -> TensorView:
    if hasattr(x, "__dlpack_device__"):
        device = x.__dlpack_device__()
        if type(device) not in (tuple, list) or len(device) != 2:
            raise InvalidArgumentError(f"{name}.__dlpack_device__() returned {shown(device)}: expected "
                                       "(device_type, device_id)")
        device_type = _bounds.integer(device[0], f"{name}.__dlpack_device__()[0]", -(1 << 31), (1 << 31) - 1)
        if device_type not in (DL_CUDA, DL_CUDA_MANAGED):
            raise InvalidArgumentError(f"{name} is a DLPack tensor on device type {device_type}: "
                                       "flashrtc needs CUDA tensors")
    try:  # DLPack: the producer makes the data ready for the consumer's stream (1 = legacy default)
        capsule = x.__dlpack__(stream=stream)
    except TypeError:  # producers older than the stream argument
        capsule = x.__dlpack__()
    if not _capsule_is_valid(capsule, b"dltensor"):
        raise TypeError(f"{name}: __dlpack__ returned no 'dltensor' capsule")
    t = DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    if t.device.device_type not in (DL_CUDA, DL_CUDA_MANAGED):
        raise InvalidArgumentError(f"{name} is a DLPack tensor on device type {t.device.device_type}: "
                                   "flashrtc needs CUDA tensors")
    ndim = t.ndim  # an int32 by DLPack's struct; the arrays it sizes are read only once it is checked
    if ndim < 0:
        raise InvalidArgumentError(f"{name}: DLPack ndim={ndim}: a count of dims cannot be negative")
    if ndim > _bounds.MAX_RANK:
        raise InvalidArgumentError(f"{name}: DLPack ndim={ndim}: flashrtc reads tensors of at most "
                                   f"{_bounds.MAX_RANK} dims (the shape array is not read)")
    if ndim and not t.shape:
        raise InvalidArgumentError(f"{name}: DLPack ndim={ndim} with a null shape array")
    shape = _bounds.shape(t.shape[:ndim] if ndim else (), f"{name}.shape")  # int64 by type: checks >= 0
    strides = tuple(t.strides[:ndim]) if t.strides and ndim else _row_major(name, shape)
    dtype = _DL_DTYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    dtype = dtype or f"DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits}, lanes {t.dtype.lanes})"
    ptr = _bounds.pointer((t.data or 0) + t.byte_offset, f"{name}.data + byte_offset")
    return TensorView(ptr, shape, strides, dtype, t.device.device_id, KIND_DLPACK, keepalive=capsule)


def _row_major(name, shape) -> Tuple[int, ...]:
    """C-order element strides of shape (each extent in [0, 2^63 - 1]); a stride beyond int64, which its C
    field would truncate, is refused."""
    strides, step = [], 1
    for n in reversed(shape):
        if step > _bounds.INT64_MAX:
            raise InvalidArgumentError(f"{name} has shape {shape}: its C-order strides exceed 2^63 - 1 elements")
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))

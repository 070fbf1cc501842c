"""What flashrtc needs to know of a tensor (pointer, shape, element strides, dtype, device), read from a
torch tensor, __cuda_array_interface__ (v2/v3) or DLPack, without importing torch or numpy.
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple, Optional, Tuple

from ._errors import InvalidArgumentError

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


def is_torch_tensor(x) -> bool:
    """A torch.Tensor or a subclass, recognised without importing torch."""
    return any(cls.__name__ == "Tensor" and cls.__module__ == "torch" for cls in type(x).__mro__)


def kind_of(x) -> Optional[str]:
    if is_torch_tensor(x):
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


def _from_torch(name, t) -> TensorView:
    if t.device.type != "cuda":
        raise InvalidArgumentError(f"{name} is on {t.device}: flashrtc needs CUDA tensors")
    return TensorView(t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype).replace("torch.", ""),
                      t.device.index, KIND_TORCH)


# Array-interface type strings; bfloat16 has none, so it comes through torch or DLPack only.
_TYPESTR = {"<f4": "float32", "<f2": "float16"}


def _from_cai(name, x) -> TensorView:
    cai = x.__cuda_array_interface__
    shape = tuple(int(n) for n in cai["shape"])
    typestr = cai["typestr"]
    dtype = _TYPESTR.get(typestr, f"typestr {typestr!r}")
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
    if cai.get("mask") is not None:
        raise InvalidArgumentError(f"{name}: masked arrays are not supported")
    ptr, readonly = cai["data"]
    if cai.get("strides") is None:
        strides = _row_major(shape)
    else:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if any(s % itemsize for s in byte_strides):
            raise InvalidArgumentError(f"{name}: byte strides {byte_strides} are not multiples of the "
                                       f"element size {itemsize}")
        strides = tuple(s // itemsize for s in byte_strides)
    return TensorView(int(ptr or 0), shape, strides, dtype, None, KIND_CAI, bool(readonly))


def cai_stream(x) -> Optional[int]:
    """The stream a v3 __cuda_array_interface__ says its data is ready on, else None."""
    stream = x.__cuda_array_interface__.get("stream")
    return None if stream is None else int(stream)


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
_DL_FLOAT, _DL_BFLOAT = 2, 4
_DL_DTYPES = {(_DL_FLOAT, 32): "float32", (_DL_FLOAT, 16): "float16", (_DL_BFLOAT, 16): "bfloat16"}

_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(name, x, stream) -> TensorView:
    if hasattr(x, "__dlpack_device__"):
        device_type, _ = x.__dlpack_device__()
        if int(device_type) not in (DL_CUDA, DL_CUDA_MANAGED):
            raise InvalidArgumentError(f"{name} is a DLPack tensor on device type {int(device_type)}: "
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
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else _row_major(shape)
    dtype = _DL_DTYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    dtype = dtype or f"DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits}, lanes {t.dtype.lanes})"
    return TensorView((t.data or 0) + t.byte_offset, shape, strides, dtype, t.device.device_id, KIND_DLPACK,
                      keepalive=capsule)


def _row_major(shape) -> Tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))

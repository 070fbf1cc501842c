"""Range checks for integers a caller or a foreign producer hands over, before they reach a C field: ctypes
truncates what does not fit (2^64 + 1 becomes 1) instead of refusing it, so every such value is checked here
and refused with InvalidArgumentError naming the field and the range."""
from __future__ import annotations

import operator

from ._errors import InvalidArgumentError

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINTPTR_MAX = (1 << 64) - 1
# DLPack sets no limit on ndim; flashrtc reads 3 or 4 dims, so a larger count is refused before its shape
# array is read (a producer could report any count).
MAX_NDIM = 64


def integer(value, field: str, low: int, high: int) -> int:
    """value as an int in [low, high]; InvalidArgumentError naming field otherwise (bools and non-integers
    included: a float or a string is no size, pointer or stride)."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{field}={value!r}: expected an integer in [{low}, {high}]")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{field}={value!r}: expected an integer in [{low}, {high}]") from None
    if number < low or number > high:
        raise InvalidArgumentError(f"{field}={number}: out of range [{low}, {high}]")
    return number


def shape(values, field: str) -> tuple:
    """Extents, each in [0, 2^63 - 1]; field names the sequence ("q.shape")."""
    values = _sequence(values, field)
    if len(values) > MAX_NDIM:
        raise InvalidArgumentError(f"{field} has {len(values)} dims: at most {MAX_NDIM} are accepted")
    if all(type(x) is int and 0 <= x <= INT64_MAX for x in values):  # the usual case, without a call per entry
        return values
    return tuple(integer(x, f"{field}[{i}]", 0, INT64_MAX) for i, x in enumerate(values))


def strides(values, field: str, ndim: int) -> tuple:
    """ndim strides, each in [-2^63, 2^63 - 1]; field names the sequence ("q.strides")."""
    values = _sequence(values, field)
    if len(values) != ndim:
        raise InvalidArgumentError(f"{field} has {len(values)} entries for {ndim} dims: expected {ndim}")
    if all(type(x) is int and INT64_MIN <= x <= INT64_MAX for x in values):
        return values
    return tuple(integer(x, f"{field}[{i}]", INT64_MIN, INT64_MAX) for i, x in enumerate(values))


def pointer(value, field: str) -> int:
    """A device pointer or a stream handle: an integer in [0, 2^64 - 1]."""
    if type(value) is int and 0 <= value <= UINTPTR_MAX:
        return value
    return integer(value, field, 0, UINTPTR_MAX)


def _sequence(values, field: str) -> tuple:
    if isinstance(values, (str, bytes)):
        raise InvalidArgumentError(f"{field}={values!r}: expected a sequence of integers")
    try:
        return tuple(values)
    except TypeError:
        raise InvalidArgumentError(f"{field}={values!r}: expected a sequence of integers") from None

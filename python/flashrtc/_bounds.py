"""Range checks for integers a caller or a foreign producer hands over, before they reach a C field: ctypes
truncates what does not fit (2^64 + 1 becomes 1) instead of refusing it, so every such value is checked here
and refused with InvalidArgumentError naming the field and the range.

A producer's sequences are read at most MAX_RANK + 1 entries deep, so a shape or strides that never ends (a
generator, itertools.count) or holds millions of entries is refused without being consumed. Pointers and
stream handles never appear in a message, whatever their value; other values only as _errors.shown allows.
"""
from __future__ import annotations

import itertools
import operator

from ._errors import InvalidArgumentError, shown, type_name

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINTPTR_MAX = (1 << 64) - 1
# The most dims of any tensor flashrtc reads (q, k, v, o and the gradients have 4, the lse 3). A DLPack ndim
# above it is refused before the shape array, whose length only ndim claims, is read.
MAX_RANK = 4


def integer(value, field: str, low: int, high: int, show: bool = True) -> int:
    """value as an int in [low, high]; InvalidArgumentError naming field otherwise (bools and non-integers
    included: a float or a string is no size, pointer or stride). show=False keeps the value out of the
    message (a pointer or a handle)."""
    # The message is built only on failure: torch.compile traces the checks of a call it compiles, and
    # shown() uses what Dynamo cannot trace (int.bit_length).
    def named():
        return f"{field}={shown(value)}" if show else f"{field} (of type {type_name(value)})"
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{named()}: expected an integer in [{low}, {high}]")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{named()}: expected an integer in [{low}, {high}]") from None
    if number < low or number > high:
        raise InvalidArgumentError(f"{field}={shown(number)}: out of range [{low}, {high}]" if show
                                   else f"{field}: out of range [{low}, {high}]")
    return number


def shape(values, field: str) -> tuple:
    """At most MAX_RANK extents, each in [0, 2^63 - 1]; field names the sequence ("q.shape")."""
    values = _sequence(values, field)
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
    """A device pointer or a stream handle: an integer in [0, 2^64 - 1], kept out of any message."""
    if type(value) is int and 0 <= value <= UINTPTR_MAX:
        return value
    return integer(value, field, 0, UINTPTR_MAX, show=False)


def _sequence(values, field: str) -> tuple:
    """The first entries of values, at most MAX_RANK of them; more is refused without reading past them."""
    if isinstance(values, (str, bytes)):
        raise InvalidArgumentError(f"{field}={shown(values)}: expected a sequence of integers")
    try:
        iterator = iter(values)
    except TypeError:
        raise InvalidArgumentError(f"{field}={shown(values)}: expected a sequence of integers") from None
    entries = tuple(itertools.islice(iterator, MAX_RANK + 1))
    if len(entries) > MAX_RANK:
        raise InvalidArgumentError(f"{field} has more than {MAX_RANK} entries: flashrtc reads tensors of at most "
                                   f"{MAX_RANK} dims")
    return entries

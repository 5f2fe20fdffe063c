"""Byte counts of the tensors Kiln allocates, checked before memory is touched.

Every allocation whose size comes from a model or an input (random inputs, folded constants, values
the interpreter computes, kernel outputs, the AOT arena) asks `check_alloc` first. The count is
Python-int arithmetic, so a product of huge dims is an error rather than a wrap-around; the bound is
the memory limit of the run in progress (`memory_limit`, set by a session or a build) when there is
one, else the memory this machine has available (kiln.target.host_available_memory).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from kiln.errors import MemoryLimitError, ShapeError
from kiln.ir.dtype import to_numpy
from kiln.target import host_available_memory

MAX_BYTES = 1 << 63  # no machine addresses more; numpy's own sizes are signed 64-bit
_LIMIT: contextvars.ContextVar[int | None] = contextvars.ContextVar("kiln_memory_limit", default=None)
_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


@contextlib.contextmanager
def memory_limit(limit: int | None) -> Iterator[None]:
    """Bound every tensor allocated inside by `limit` bytes (None: keep the bound already in force)."""
    if limit is None:
        yield
        return
    token = _LIMIT.set(int(limit))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def current_limit() -> tuple[int, str]:
    """(bytes, what they are) of the bound in force: the run's memory limit, else what the machine has."""
    limit = _LIMIT.get()
    if limit is not None:
        return limit, "the memory limit"
    available = host_available_memory()
    return (available, "available") if available is not None else (MAX_BYTES, "addressable")


def itemsize(dtype: Any) -> int:
    """Bytes per element of a Kiln dtype name or a numpy dtype (strings count their object pointer)."""
    return (to_numpy(dtype) if isinstance(dtype, str) else np.dtype(dtype)).itemsize


def tensor_bytes(shape: Iterable[Any], dtype: Any, what: str) -> int:
    """Bytes of a tensor of `shape` and `dtype`, exact; a negative dim is a ShapeError and a count
    beyond MAX_BYTES a MemoryLimitError (not a wrapped-around product)."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise ShapeError(f"{what}: shape {dims} has a negative dim")
    count = itemsize(dtype)
    for d in dims:
        count *= d
    if count >= MAX_BYTES:
        raise MemoryLimitError(f"{what} needs {format_bytes(count)} ({_describe(dims, dtype)}), more than "
                               f"any machine can address")
    return count


def check_alloc(what: str, shape: Iterable[Any], dtype: Any) -> int:
    """The tensor's byte count, once it is known to fit the bound in force (else MemoryLimitError)."""
    dims = [int(d) for d in shape]
    count = tensor_bytes(dims, dtype, what)
    limit, kind = current_limit()
    if count > limit:
        raise MemoryLimitError(f"{what} needs {format_bytes(count)} ({_describe(dims, dtype)}); "
                               f"{format_bytes(limit)} {'is' if kind == 'the memory limit' else 'are'} {kind}")
    return count


def fits(shape: Iterable[Any], dtype: Any) -> bool:
    """Whether a tensor of `shape` fits the bound in force: for optimizations (folding, weight
    rewrites), which leave a call as it is rather than fail."""
    try:
        check_alloc("", shape, dtype)
    except (MemoryLimitError, ShapeError):
        return False
    return True


def check_bytes(what: str, count: int) -> None:
    """Check a byte count that is no single tensor (an arena) against the bound in force."""
    limit, kind = current_limit()
    if count > limit:
        raise MemoryLimitError(f"{what} needs {format_bytes(count)}; {format_bytes(limit)} "
                               f"{'is' if kind == 'the memory limit' else 'are'} {kind}")


def format_bytes(n: int) -> str:
    """`n` bytes in the largest binary unit that keeps it at least 1 (8.0 TiB)."""
    value, unit = float(n), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{n} bytes" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def _describe(dims: list[int], dtype: Any) -> str:
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return f"shape {dims} {name}"

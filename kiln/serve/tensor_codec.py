"""One tensor in the KServe v2 protocol: its datatype name, and its data as JSON or as raw bytes
(the binary tensor extension: little-endian, row-major; BYTES elements each prefixed by a 4-byte
little-endian length). Every check names the tensor, because the client needs to know which one
it got wrong."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from kiln.errors import ServeError
from kiln.ir import dtype as kiln_dtype

KSERVE_TO_KILN = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
                  "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16",
                  "FP32": "float32", "FP64": "float64", "BF16": "bfloat16", "BYTES": "string"}
KILN_TO_KSERVE = {v: k for k, v in KSERVE_TO_KILN.items()}
LENGTH = struct.Struct("<I")


def kserve_type(dtype: str) -> str:
    """The protocol's name of a Kiln dtype; a type the protocol lacks (complex64, float8...) is shown by
    its Kiln name in upper case, which no request can match, so such an input is refused by name."""
    return KILN_TO_KSERVE.get(dtype, dtype.upper())


def datatype_of(arr: np.ndarray) -> str:
    return kserve_type(kiln_dtype.from_numpy(arr.dtype))


def element_count(what: str, shape: Any) -> int:
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise ServeError(f"{what}: 'shape' must be a list of non-negative integers, got {shape!r}")
    return math.prod(shape)


def from_binary(what: str, datatype: str, shape: list[int], buf: memoryview) -> np.ndarray:
    """The tensor `buf` holds (exactly its bytes: the caller slices them by binary_data_size)."""
    count = element_count(what, shape)
    if datatype == "BYTES":
        return _bytes_elements(what, buf, count).reshape(shape)
    dt = np.dtype(kiln_dtype.to_numpy(KSERVE_TO_KILN[datatype])).newbyteorder("<")
    if len(buf) != count * dt.itemsize:
        raise ServeError(f"{what}: binary_data_size is {len(buf)} bytes but shape {shape} of {datatype} "
                         f"takes {count * dt.itemsize}")
    return np.frombuffer(buf, dtype=dt).reshape(shape).astype(dt.newbyteorder("="), copy=True)


def _bytes_elements(what: str, buf: memoryview, count: int) -> np.ndarray:
    out, at = [], 0
    for i in range(count):
        if at + 4 > len(buf):
            raise ServeError(f"{what}: binary BYTES data ends inside element {i} of {count}")
        (n,) = LENGTH.unpack_from(buf, at)
        if at + 4 + n > len(buf):
            raise ServeError(f"{what}: binary BYTES element {i} says {n} bytes; only {len(buf) - at - 4} remain")
        out.append(_text(what, bytes(buf[at + 4:at + 4 + n])))
        at += 4 + n
    if at != len(buf):
        raise ServeError(f"{what}: {len(buf) - at} bytes of binary data after its {count} BYTES elements")
    return np.array(out, dtype=object)


def _text(what: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ServeError(f"{what}: a BYTES element is not UTF-8 text (Kiln's string tensors hold text)") from None


def from_json(what: str, datatype: str, shape: list[int], data: Any) -> np.ndarray:
    """The tensor a JSON `data` field holds (flat or nested, row-major)."""
    count = element_count(what, shape)
    if datatype == "BYTES":
        flat = np.array(data, dtype=object).reshape(-1)
        if not all(isinstance(s, str) for s in flat):
            raise ServeError(f"{what}: BYTES data must be JSON strings")
    else:
        try:
            flat = np.asarray(data, dtype=kiln_dtype.to_numpy(KSERVE_TO_KILN[datatype])).reshape(-1)
        except (ValueError, TypeError, OverflowError) as e:
            raise ServeError(f"{what}: 'data' does not hold {datatype} values: {e}") from None
    if flat.size != count:
        raise ServeError(f"{what}: 'data' has {flat.size} elements but shape {shape} takes {count}")
    return flat.reshape(shape)


def to_binary(arr: np.ndarray) -> bytes:
    if arr.dtype == object or arr.dtype.kind in "US":
        return b"".join(LENGTH.pack(len(b)) + b for b in (_raw(v) for v in arr.reshape(-1)))
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()


def to_json(arr: np.ndarray) -> list:
    if arr.dtype == object or arr.dtype.kind in "US":
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1)]
    return arr.reshape(-1).tolist()


def _raw(v: Any) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode("utf-8")

"""Element types: one canonical name per ONNX tensor type, with its numpy dtype.

Names follow numpy where numpy has the type (float32, int64, bool), ml_dtypes otherwise
(bfloat16, float8_e4m3fn, int4, ...); strings are `string` (numpy object arrays).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

# (ONNX TensorProto enum, canonical name, numpy dtype)
_TABLE: list[tuple[int, str, np.dtype]] = [
    (1, "float32", np.dtype(np.float32)),
    (2, "uint8", np.dtype(np.uint8)),
    (3, "int8", np.dtype(np.int8)),
    (4, "uint16", np.dtype(np.uint16)),
    (5, "int16", np.dtype(np.int16)),
    (6, "int32", np.dtype(np.int32)),
    (7, "int64", np.dtype(np.int64)),
    (8, "string", np.dtype(object)),
    (9, "bool", np.dtype(np.bool_)),
    (10, "float16", np.dtype(np.float16)),
    (11, "float64", np.dtype(np.float64)),
    (12, "uint32", np.dtype(np.uint32)),
    (13, "uint64", np.dtype(np.uint64)),
    (14, "complex64", np.dtype(np.complex64)),
    (15, "complex128", np.dtype(np.complex128)),
    (16, "bfloat16", np.dtype(ml_dtypes.bfloat16)),
    (17, "float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn)),
    (18, "float8_e4m3fnuz", np.dtype(ml_dtypes.float8_e4m3fnuz)),
    (19, "float8_e5m2", np.dtype(ml_dtypes.float8_e5m2)),
    (20, "float8_e5m2fnuz", np.dtype(ml_dtypes.float8_e5m2fnuz)),
    (21, "uint4", np.dtype(ml_dtypes.uint4)),
    (22, "int4", np.dtype(ml_dtypes.int4)),
    (23, "float4_e2m1fn", np.dtype(ml_dtypes.float4_e2m1fn)),
    (24, "float8_e8m0fnu", np.dtype(ml_dtypes.float8_e8m0fnu)),
    (25, "uint2", np.dtype(ml_dtypes.uint2)),
    (26, "int2", np.dtype(ml_dtypes.int2)),
]

ONNX_TO_NAME = {code: name for code, name, _ in _TABLE}
NAME_TO_ONNX = {name: code for code, name, _ in _TABLE}
NAME_TO_NUMPY = {name: dt for _, name, dt in _TABLE}
ALL = tuple(name for _, name, _ in _TABLE)

FLOATS = ("float16", "bfloat16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTS
SMALL_FLOATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                "float8_e8m0fnu", "float4_e2m1fn")
SMALL_INTS = ("int4", "uint4", "int2", "uint2")


def to_numpy(name: str) -> np.dtype:
    """numpy dtype of a canonical dtype name."""
    return NAME_TO_NUMPY[name]


def from_numpy(dt: np.dtype | type) -> str:
    """Canonical name of a numpy dtype (object arrays are strings)."""
    dt = np.dtype(dt)
    if dt.kind in "OUS":
        return "string"
    for name, ndt in NAME_TO_NUMPY.items():
        if ndt == dt and name != "string":
            return name
    raise ValueError(f"no Kiln dtype for numpy dtype {dt}")


def from_onnx(code: int) -> str:
    if code not in ONNX_TO_NAME:
        raise ValueError(f"unsupported ONNX tensor element type {code}")
    return ONNX_TO_NAME[code]


def is_float(name: str) -> bool:
    return name in FLOATS or name in SMALL_FLOATS

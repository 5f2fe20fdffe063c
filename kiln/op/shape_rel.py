"""Type-relation helpers the tensor operator families share: constant integer inputs, checks of
index-vector inputs (axes, pads, shape ...) and arithmetic on dims that may be symbolic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, TensorType
from kiln.op.typerel import check_dtype, norm_axis, tensor

INDEX = ("int32", "int64")
I64 = np.int64


def int_values(v: np.ndarray | None) -> tuple[int, ...] | None:
    """A constant integer input (scalar or 1-D) as Python ints; None when not a constant."""
    return None if v is None else tuple(int(x) for x in np.asarray(v).reshape(-1))


def padded(items: list, n: int) -> list:
    """Argument types/values padded with None to n entries (trailing omitted inputs are dropped)."""
    return list(items) + [None] * (n - len(items))


def index_input(t, what: str, dtypes: Sequence[str] = INDEX) -> TensorType:
    """A tensor input whose dtype must be an index type (indices, shapes, axes ...)."""
    t = tensor(t, what)
    check_dtype(t, dtypes, what)
    return t


def index_vector(t, what: str, dtypes: Sequence[str] = ("int64",)) -> int | None:
    """Check a 1-D integer input (axes, pads, shape...) and return its static length, if known.
    A scalar counts as one element, as onnxruntime accepts it."""
    t = index_input(t, what, dtypes)
    if t.shape is None:
        return None
    if len(t.shape) == 0:
        return 1
    if len(t.shape) != 1:
        raise TypeInferenceError(f"{what} must be 1-D, got shape {t.shape}")
    return t.shape[0] if isinstance(t.shape[0], int) else None


def check_rank(t: TensorType, lo: int, what: str = "input") -> None:
    """An input of at least rank lo (an unknown rank passes)."""
    if t.shape is not None and len(t.shape) < lo:
        raise TypeInferenceError(f"{what} must have rank >= {lo}, got shape {t.shape}")


def norm_axes(axes: Sequence[int], rank: int | None, what: str = "axes") -> tuple[int, ...]:
    """Axes made non-negative; naming an axis twice is an error."""
    out = tuple(norm_axis(a, rank, what) for a in axes)
    if len(set(out)) != len(out):
        raise TypeInferenceError(f"{what} {tuple(axes)} name an axis twice")
    return out


def mul_dim(d: Dim, k: int) -> Dim:
    """d * k for a dim and a constant factor."""
    if isinstance(d, int):
        return d * k
    if k == 0:
        return 0
    return d if k == 1 else ANY


def div_dim(d: Dim, k: int, what: str) -> Dim:
    """d / k where k must divide d."""
    if not isinstance(d, int):
        return d if k == 1 else ANY
    if k <= 0 or d % k:
        raise TypeInferenceError(f"{what}: dim {d} is not divisible by {k}")
    return d // k


def dim_product(dims: Sequence[Dim]) -> Dim:
    """Product of dims: an int, the single symbolic dim when the rest multiply to 1, else ANY."""
    syms = [d for d in dims if not isinstance(d, int)]
    n = math.prod(d for d in dims if isinstance(d, int))
    if not syms or n == 0:
        return n
    return syms[0] if len(syms) == 1 and n == 1 else ANY


def unify_dim(a: Dim, b: Dim, what: str) -> Dim:
    """Two dims that must be equal: the more precise of them."""
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            raise TypeInferenceError(f"{what}: dims {a} and {b} differ")
        return a
    if isinstance(b, int) or a == ANY:
        return b
    return a


def zero_of(dtype: np.dtype):
    """The zero of a numpy dtype as a scalar ("" for strings, which numpy stores as objects)."""
    return "" if dtype == np.dtype(object) else np.zeros((), dtype)[()]

"""Operator attribute comparison: equality of attrs dataclasses that compares array fields by value.

Lives in ir because structural equality, the printer and the passes all compare attributes, and
none of them should need the operator registry (kiln.op, a layer above) to do it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np


def attr_items(attrs: Any) -> list[tuple[str, Any]]:
    """(name, value) of every attribute field, in declaration order."""
    if attrs is None:
        return []
    return [(f.name, getattr(attrs, f.name)) for f in fields(attrs)]


def attrs_equal(a: Any, b: Any) -> bool:
    """Attribute equality that treats array-valued fields by value."""
    if type(a) is not type(b):
        return False
    for (_, x), (_, y) in zip(attr_items(a), attr_items(b)):
        if not value_equal(x, y):
            return False
    return True


def value_equal(x: Any, y: Any) -> bool:
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype == y.dtype
                and x.shape == y.shape):
            return False
        if x.dtype.kind == "V":  # ml_dtypes floats (bfloat16, float8...): compare widened, NaN == NaN
            x, y = x.astype(np.float64), y.astype(np.float64)
        return bool(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        return len(x) == len(y) and all(value_equal(p, q) for p, q in zip(x, y))
    if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
        return True
    return type(x) is type(y) and x == y

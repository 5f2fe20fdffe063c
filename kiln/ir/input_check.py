"""`check_input`: a run-time value (a model's input) against the IR type it is declared with.

In ir, not with the interpreter that also checks its feeds with it, because the runtime's executors
check theirs too and need nothing else of the operator layer to do it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import InputError
from kiln.ir import dtype as _dt
from kiln.ir.types import OptionalType, SeqType, SizeVar, TensorType, Type


def check_input(name: str, value: Any, t: Type, dims: dict[str, int]) -> Any:
    """Check a run-time input against its declared type; binds symbolic dims in `dims`."""
    if isinstance(t, TensorType):
        if not isinstance(value, np.ndarray):
            if isinstance(value, (list, tuple)) or value is None:
                raise InputError(f"input '{name}' must be a tensor of {t}, got {type(value).__name__}")
            value = np.asarray(value)
        want = _dt.to_numpy(t.dtype)
        got = _dt.from_numpy(value.dtype) if value.dtype.kind != "U" else "string"
        if got != t.dtype:
            raise InputError(f"input '{name}' has dtype {value.dtype}; expected {t.dtype}")
        if value.dtype.kind == "U":
            value = value.astype(want)
        if t.shape is not None:
            if value.ndim != len(t.shape):
                raise InputError(f"input '{name}' has shape {value.shape}; expected rank {len(t.shape)} "
                                 f"({t})")
            for i, (d, n) in enumerate(zip(t.shape, value.shape)):
                if isinstance(d, int) and d != n:
                    raise InputError(f"input '{name}' has shape {value.shape}; expected dim {i} = {d} ({t})")
                if isinstance(d, SizeVar) and d.name != "?":
                    if dims.setdefault(d.name, n) != n:
                        raise InputError(f"input '{name}' dim {i} is {n} but symbolic dim '{d.name}' "
                                         f"is already {dims[d.name]} from another input")
        return value
    if isinstance(t, SeqType):
        if not isinstance(value, (list, tuple)):
            raise InputError(f"input '{name}' must be a sequence (list), got {type(value).__name__}")
        # each element binds its own symbolic dims: elements of one sequence may differ in size
        return [check_input(f"{name}[{i}]", v, t.elem, dict(dims)) for i, v in enumerate(value)]
    if isinstance(t, OptionalType):
        return None if value is None else check_input(name, value, t.elem, dims)
    return value

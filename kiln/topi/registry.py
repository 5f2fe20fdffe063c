"""Where each operator's te compute is registered, and the helpers computes share.

A compute is `f(attrs, inputs, out_type, consts)`: `inputs` holds one te.Tensor per operator
input (None for an omitted optional one), `out_type` is the call's inferred type (shapes and
dtypes), and `consts[i]` is the numpy value of input i when the call's argument is a Constant
(else None) — shape-deciding inputs (axes, shape, pads, repeats ...) are read from there. It
returns a te.Tensor, or a tuple of them for an operator with a tuple type. The function is
stored on the operator record, `get_op(name).compute`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln import tir
from kiln.errors import ComputeError  # noqa: F401  (re-exported)
from kiln.ir.types import SizeVar, TensorType, TupleType, Type
from kiln.op.registry import get_op
from kiln.te.tensor import Tensor

ComputeFn = Callable[[Any, list, Type, list], "Tensor | tuple[Tensor, ...]"]



def register_compute(name: str) -> Callable[[ComputeFn], ComputeFn]:
    """Decorator: `fn` is the compute of operator `name` (an error when it already has one)."""
    def deco(fn: ComputeFn) -> ComputeFn:
        get_op(name).attach_compute(fn)
        return fn

    return deco


def handles_runtime_dims(*names: str) -> None:
    """Mark ops whose computes stay correct on dims known only at run time (a dim of 1 broadcasts by
    a run-time test, or no dim broadcasts at all); kiln.codegen.lower_fused refuses any other op on
    such dims, because which of them broadcast is decided by the data."""
    for name in names:
        get_op(name).mark_runtime_dims()


def get_compute(name: str) -> ComputeFn | None:
    return get_op(name).compute


def compute_call(name: str, attrs: Any, inputs: Sequence[Tensor | None], out_type: Type,
                 consts: Sequence[np.ndarray | None]) -> tuple[Tensor, ...]:
    """Run the compute of operator `name`; always returns a tuple (one entry per output)."""
    fn = get_compute(name)
    if fn is None:
        raise ComputeError(f"{name} has no te compute")
    lo, hi = get_op(name).num_inputs
    n = max(len(inputs), hi if hi is not None else len(inputs))
    ins = list(inputs) + [None] * (n - len(inputs))
    cs = list(consts) + [None] * (n - len(consts))
    out = fn(attrs, ins, out_type, cs)
    return out if isinstance(out, tuple) else (out,)


# ---------------------------------------------------------------------------------------------
# helpers for computes


def const_ints(name: str, consts: Sequence[np.ndarray | None], i: int, what: str,
               required: bool = True) -> tuple[int, ...] | None:
    """Constant input i as Python ints (scalar or 1-D); ComputeError when required and not constant."""
    v = consts[i] if i < len(consts) else None
    if v is None:
        if required:
            raise ComputeError(f"{name}: input {i} ({what}) must be a constant to generate code")
        return None
    return tuple(int(x) for x in np.asarray(v).reshape(-1))


def const_value(name: str, consts: Sequence[np.ndarray | None], i: int, what: str):
    """A one-element constant input as a Python scalar."""
    v = consts[i] if i < len(consts) else None
    if v is None:
        raise ComputeError(f"{name}: input {i} ({what}) must be a constant to generate code")
    return np.asarray(v).reshape(-1)[0].item()


def tensor_type(t: Type, k: int = 0) -> TensorType:
    """Output k of a call's type."""
    return t.fields[k] if isinstance(t, TupleType) else t


def out_dims(out_type: Type, inputs: Sequence[Tensor | None], k: int = 0) -> tuple[tir.PrimExpr, ...]:
    """Output k's dims as te expressions: ints as immediates, a named symbolic dim as the input
    shape Var of that name (so sizes stay shared), an unknown one as a fresh Var."""
    t = tensor_type(out_type, k)
    if t.shape is None:
        raise ComputeError(f"output rank unknown ({t}): cannot generate code")
    named = {d.name: d for x in inputs if x is not None for d in x.shape if isinstance(d, tir.Var)}
    out = []
    for d in t.shape:
        if isinstance(d, SizeVar):
            v = named.get(d.name)
            out.append(v if v is not None else tir.Var(d.name if d.name != "?" else "any"))
        else:
            out.append(tir.IntImm(int(d)))
    return tuple(out)


def static_shape(name: str, x: Tensor) -> tuple[int, ...]:
    """x's shape as ints; ComputeError when a dim is symbolic."""
    if not all(isinstance(d, tir.IntImm) for d in x.shape):
        raise ComputeError(f"{name}: needs a static input shape, got {x.shape}")
    return tuple(d.value for d in x.shape)


def static_dim(name: str, d: tir.PrimExpr, what: str) -> int:
    """Dim d as an int; ComputeError when it is symbolic."""
    if not isinstance(d, tir.IntImm):
        raise ComputeError(f"{name}: {what} must be static, got {d}")
    return d.value


F64 = "float64"


def f64(v: float) -> tir.PrimExpr:
    """A float64 immediate: computes that follow a float64 reference compute in it."""
    return tir.const(float(v), F64)


def is_one(d: tir.PrimExpr) -> bool:
    return isinstance(d, tir.IntImm) and d.value == 1


def broadcast_load(x: Tensor, idx: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
    """x read at output index idx under numpy broadcasting (trailing alignment, unit dims pinned)."""
    off = len(idx) - x.ndim
    return x(*(tir.const(0) if is_one(d) else idx[off + k] for k, d in enumerate(x.shape)))


def to_dtype(e: tir.PrimExpr, dtype: str) -> tir.PrimExpr:
    return tir.cast(dtype, e)

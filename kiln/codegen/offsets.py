"""Element offsets of buffer accesses, shared by loads and stores.

An access is multi-dimensional (one index per dim, row-major or `buf.strides`) or one flat index
(after storage_flatten). Vector indices reduce to a ramp (base, lane stride) whenever they are
sums and scalings of Ramps and Broadcasts, so unsimplified tir still gets contiguous vector
loads; anything else is a general per-lane offset vector (a gather or scatter).
"""

from __future__ import annotations

from kiln.codegen.c_types import CodegenError
from kiln.tir import expr as E
from kiln.tir.arith import Simplifier
from kiln.tir.expr import lanes_of


def flat_offset(buf, indices, sim: Simplifier | None = None) -> tuple[E.PrimExpr, E.PrimExpr, E.PrimExpr | None, int]:
    """(base, lane stride, general vector offset or None, lanes) of buf[indices], in elements. `sim` (the
    enclosing loops' bounds) simplifies the sums base and stride (the indices are simplified already):
    only the flat sum shows that a reshape's unraveled indices, x // 204 * 3264 + (16x + i) // 68 % 48 * 68
    + (16x + i) % 68, are 16x + i."""
    strides = buf.strides if buf.strides is not None else row_major(buf.shape)
    if len(indices) == len(strides):
        terms = list(zip(indices, strides))
    elif len(indices) == 1:
        terms = [(indices[0], E.IntImm(1))]
    else:
        raise CodegenError(f"buffer {buf.name!r} has {len(strides)} dims but is indexed with {len(indices)}")
    base, stride, lanes = E.IntImm(0), E.IntImm(0), max((lanes_of(i.dtype) for i in indices), default=1)
    for idx, st in terms:
        ramp = as_ramp(idx) if lanes_of(idx.dtype) > 1 else (idx, E.IntImm(0))
        if ramp is None:
            return base, stride, _vector_offset(terms, lanes), lanes
        base, stride = add(base, mul(ramp[0], st)), add(stride, mul(ramp[1], st))
    if sim is not None and all(E.elem_of(x.dtype) == "int64" for t in terms for x in t):  # C widens int32 terms
        base, stride = sim.sum(base), sim.sum(stride)
    return base, stride, None, lanes


def _vector_offset(terms, lanes: int) -> E.PrimExpr:
    vec = None
    for idx, st in terms:
        v = idx if lanes_of(idx.dtype) > 1 else E.Broadcast(idx, lanes)
        term = E.Mul(E.Cast(f"int64x{lanes}", v), E.Broadcast(E.Cast("int64", st), lanes))
        vec = term if vec is None else E.Add(vec, term)
    return vec


def as_ramp(e: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr] | None:
    """(base, stride) when the vector e is base + lane * stride, else None."""
    if isinstance(e, E.Ramp):
        return e.base, e.stride
    if isinstance(e, E.Broadcast):
        return e.value, E.IntImm(0)
    if isinstance(e, E.Cast) and lanes_of(e.value.dtype) > 1:
        r = as_ramp(e.value)
        scalar = E.elem_of(e.dtype)
        return None if r is None else (E.Cast(scalar, r[0]), E.Cast(scalar, r[1]))
    if isinstance(e, (E.Add, E.Sub)):
        a, b = as_ramp(e.a), as_ramp(e.b)
        if a is None or b is None:
            return None
        if isinstance(e, E.Add):
            return add(a[0], b[0]), add(a[1], b[1])
        return E.Sub(a[0], b[0]), E.Sub(a[1], b[1])
    if isinstance(e, E.Mul):
        a, b = as_ramp(e.a), as_ramp(e.b)
        if a is not None and b is not None and is_const(b[1], 0):
            return mul(a[0], b[0]), mul(a[1], b[0])
        if a is not None and b is not None and is_const(a[1], 0):
            return mul(a[0], b[0]), mul(a[0], b[1])
    return None


def row_major(shape: tuple[E.PrimExpr, ...]) -> list[E.PrimExpr]:
    strides, acc = [], E.IntImm(1)
    for d in reversed(shape):
        strides.append(acc)
        acc = mul(acc, d)
    return strides[::-1]


def is_const(e: E.PrimExpr, value: int) -> bool:
    return isinstance(e, E.IntImm) and e.value == value


def add(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm):
        return E.IntImm(a.value + b.value)
    if is_const(a, 0):
        return b
    return a if is_const(b, 0) else E.Add(a, b)


def mul(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm):
        return E.IntImm(a.value * b.value)
    if is_const(a, 0) or is_const(b, 0):
        return E.IntImm(0)
    if is_const(a, 1):
        return b
    return a if is_const(b, 1) else E.Mul(a, b)

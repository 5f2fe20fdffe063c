"""Interval bound analysis of integer tir expressions.

`bound(e, bounds)` is an inclusive interval (lo, hi) of Python ints holding every value `e` can
take, lane by lane, when each Var lies in its interval in `bounds` (a Var not there spans its
dtype). Intervals are computed exactly and then checked against the dtype: a result that may
wrap around becomes the whole dtype range, so bounds stay sound under integer overflow.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import ml_dtypes

from kiln.ir.dtype import to_numpy
from kiln.tir import expr as E
from kiln.tir.eval import wrap_int
from kiln.tir.expr import elem_of, is_float

Interval = tuple[int, int]
VarBounds = Mapping[E.Var, tuple[int | None, int | None]]


def is_int(dtype: str) -> bool:
    """Integer or bool (one lane or many): the dtypes bound analysis covers."""
    return not is_float(dtype)


@functools.cache  # hot: bound analysis asks for it on every node; ml_dtypes.iinfo is slow
def dtype_range(dtype: str) -> Interval:
    if elem_of(dtype) == "bool":
        return (0, 1)
    info = ml_dtypes.iinfo(to_numpy(elem_of(dtype)))  # int4 and friends too
    return (int(info.min), int(info.max))


def fit(iv: Interval, dtype: str) -> Interval:
    """`iv` if every value in it is representable in `dtype`, else the whole dtype range."""
    lo, hi = dtype_range(dtype)
    return iv if lo <= iv[0] and iv[1] <= hi else (lo, hi)


def fits(iv: Interval, dtype: str) -> bool:
    lo, hi = dtype_range(dtype)
    return lo <= iv[0] and iv[1] <= hi


def mul_iv(a: Interval, b: Interval) -> Interval:
    c = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return (min(c), max(c))


def _tdiv(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _div_iv(a: Interval, b: Interval, div) -> Interval:
    if b[0] <= 0 <= b[1]:
        m = max(abs(a[0]), abs(a[1]))
        return (-m, m)
    c = [div(x, y) for x in a for y in b]
    return (min(c), max(c))


def _floormod_iv(a: Interval, b: Interval) -> Interval:
    if b[0] >= 1:
        if a[0] >= 0 and a[1] < b[0]:
            return a
        return (0, min(b[1] - 1, a[1]) if a[0] >= 0 else b[1] - 1)
    if b[1] <= -1:
        return (b[0] + 1, 0)
    m = max(abs(b[0]), abs(b[1]))
    return (min(a[0], -m), max(a[1], m))


def _truncmod_iv(a: Interval, b: Interval) -> Interval:
    m = max(abs(b[0]), abs(b[1])) - 1
    if b[0] <= 0 <= b[1]:
        return (min(a[0], -m), max(a[1], m))
    if a[0] >= 0:
        return (0, min(a[1], m))
    if a[1] <= 0:
        return (max(a[0], -m), 0)
    return (-m, m)


_ARITH = {
    E.Add: lambda a, b: (a[0] + b[0], a[1] + b[1]),
    E.Sub: lambda a, b: (a[0] - b[1], a[1] - b[0]),
    E.Mul: mul_iv,
    E.FloorDiv: lambda a, b: _div_iv(a, b, lambda x, y: x // y),
    E.TruncDiv: lambda a, b: _div_iv(a, b, _tdiv),
    E.Div: lambda a, b: _div_iv(a, b, _tdiv),
    E.FloorMod: _floormod_iv,
    E.TruncMod: _truncmod_iv,
    E.Min: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    E.Max: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
}


class BoundAnalyzer:
    """Intervals of integer expressions under fixed Var bounds (memoized per node)."""

    def __init__(self, bounds: VarBounds | None = None):
        self.bounds: dict[E.Var, Interval] = {}
        self._memo: dict[int, tuple[E.PrimExpr, Interval]] = {}
        for v, (lo, hi) in (bounds or {}).items():
            self.bind(v, lo, hi)

    def bind(self, v: E.Var, lo: int | None, hi: int | None) -> None:
        dlo, dhi = dtype_range(v.dtype)
        self.bounds[v] = (dlo if lo is None else max(dlo, lo), dhi if hi is None else min(dhi, hi))
        self._memo.clear()

    @contextmanager
    def scope(self, v: E.Var, lo: int | None, hi: int | None) -> Iterator[None]:
        """`v` bound to [lo, hi] inside the `with` block, its previous bound restored after."""
        old = self.bounds.get(v)
        self.bind(v, lo, hi)
        try:
            yield
        finally:
            del self.bounds[v]
            if old is not None:
                self.bounds[v] = old
            self._memo.clear()

    def __call__(self, e: E.PrimExpr) -> Interval:
        if is_float(e.dtype):
            raise TypeError(f"bound analysis of a float expression: {e}")
        hit = self._memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        iv = fit(self._bound(e), e.dtype)
        self._memo[id(e)] = (e, iv)
        return iv

    def _bound(self, e: E.PrimExpr) -> Interval:
        t = type(e)
        if t in _ARITH:
            return _ARITH[t](self(e.a), self(e.b))
        if t is E.IntImm:
            v = wrap_int(e.value, e.dtype)
            return (v, v)
        if t is E.Var:
            return self.bounds.get(e, dtype_range(e.dtype))
        if t is E.Select:
            a, b = self(e.t), self(e.f)
            c = self(e.cond) if not is_float(e.cond.dtype) else (0, 1)
            return a if c[0] >= 1 else b if c[1] <= 0 else (min(a[0], b[0]), max(a[1], b[1]))
        if t is E.Cast and not is_float(e.value.dtype):
            if elem_of(e.dtype) == "bool":
                return (0, 1)
            return fit(self(e.value), e.dtype)
        if t is E.Ramp:
            base, stride = self(e.base), self(e.stride)
            last = mul_iv(stride, (e.lanes - 1, e.lanes - 1))
            return (min(base[0], base[0] + last[0]), max(base[1], base[1] + last[1]))
        if t is E.Broadcast:
            return self(e.value)
        if t is E.Let and not is_float(e.value.dtype):
            old = self.bounds.get(e.var)
            self.bounds[e.var] = self(e.value)
            try:
                return self._bound(e.body)
            finally:
                self.bounds.pop(e.var)
                if old is not None:
                    self.bounds[e.var] = old
        return dtype_range(e.dtype)


def bound(e: E.PrimExpr, bounds: VarBounds | None = None) -> Interval:
    """Inclusive interval of integer expression `e` given inclusive intervals of its Vars."""
    return BoundAnalyzer(bounds)(e)

"""Index arithmetic for scheduling and lowering: a linear normal form for index expressions and
their interval bounds with symbolic endpoints (bound inference for compute_at).

Index expressions are kept in a linear normal form (sum of coefficient * atom + constant) so
that differences such as (io*4 + 5) - io*4 fold to constants: allocation sizes must be static.
"""

from __future__ import annotations

from kiln.tir.expr import Add, Cast, FloorDiv, FloorMod, IntImm, Max, Min, Mul, PrimExpr, Sub, Var, is_float, lanes_of
from kiln.tir.functor import rebuild, walk

Interval = tuple[PrimExpr, PrimExpr]


def _linear(e: PrimExpr) -> tuple[dict[PrimExpr, int], int]:
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, (Add, Sub)):
        ta, ca = _linear(e.a)
        tb, cb = _linear(e.b)
        sign = 1 if isinstance(e, Add) else -1
        for k, v in tb.items():
            ta[k] = ta.get(k, 0) + sign * v
        return {k: v for k, v in ta.items() if v}, ca + sign * cb
    if isinstance(e, Mul):
        ta, ca = _linear(e.a)
        tb, cb = _linear(e.b)
        if not ta or not tb:
            terms, c = (tb, ca) if not ta else (ta, cb)
            return {k: v * c for k, v in terms.items() if v * c}, ca * cb
    atom = _fold(rebuild(e, canon, _no_stmt))
    return _linear(atom) if type(atom) is not type(e) else ({atom: 1}, 0)


def _no_stmt(s):
    raise TypeError("statement in an index expression")


def _fold(e: PrimExpr) -> PrimExpr:
    """Constant-fold a non-linear index node (floordiv/floormod/min/max)."""
    if isinstance(e, (FloorDiv, FloorMod)) and isinstance(e.b, IntImm):
        if e.b.value == 1:
            return e.a if isinstance(e, FloorDiv) else IntImm(0, e.dtype)
        if isinstance(e.a, IntImm) and e.b.value:
            v = e.a.value // e.b.value if isinstance(e, FloorDiv) else e.a.value % e.b.value
            return IntImm(v, e.dtype)
    if isinstance(e, (Min, Max)):
        d = canon(e.a - e.b)
        if isinstance(d, IntImm):
            return e.a if (d.value <= 0) == isinstance(e, Min) else e.b
    return e


def canon(e: PrimExpr) -> PrimExpr:
    """The linear normal form of an integer scalar expression (others are returned as they are)."""
    if not _integer_scalar(e) or isinstance(e, (IntImm, Var)):
        return e
    return _from_linear(*_linear(e), e.dtype)


def _integer_scalar(e: PrimExpr) -> bool:
    return not (is_float(e.dtype) or lanes_of(e.dtype) > 1 or e.dtype == "bool")


def _from_linear(terms: dict[PrimExpr, int], c: int, dtype: str) -> PrimExpr:
    out: PrimExpr | None = None
    for atom, k in terms.items():
        term = atom if abs(k) == 1 else atom * IntImm(abs(k), dtype)
        if out is None:
            out = term if k > 0 else IntImm(0, dtype) - term
        else:
            out = out + term if k > 0 else out - term
    if out is None:
        return IntImm(c, dtype)
    return out if c == 0 else (out + IntImm(c, dtype) if c > 0 else out - IntImm(-c, dtype))


def _mod_reduced(a: PrimExpr, c: int) -> PrimExpr:
    """`a` without the linear terms whose coefficient c divides, and its constant taken mod c: the
    same value mod c. A blocked index (block * c + lane) % c then bounds to the lane alone, not to
    [0, c): bound inference gives a compute_at producer one block per iteration, not all of them."""
    if not _integer_scalar(a):
        return a
    terms, k = _linear(a)
    kept = {atom: v for atom, v in terms.items() if v % c}
    if len(kept) == len(terms) and 0 <= k < c:
        return a
    return _from_linear(kept, k % c, a.dtype)


def const_value(e: PrimExpr) -> int | None:
    e = canon(e)
    return e.value if isinstance(e, IntImm) else None


def _min(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return _fold(Min(a, b))


def _max(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return _fold(Max(a, b))


def bound(e: PrimExpr, dom: dict[Var, Interval]) -> Interval | None:
    """Inclusive bounds of `e` when each Var in `dom` ranges over its interval and every other Var
    is fixed; None when the bound is unknown (a non-affine use of a ranging Var)."""
    if not any(isinstance(x, Var) and x in dom for x in walk(e)):
        return e, e
    if isinstance(e, Var):
        return dom[e]
    if isinstance(e, Cast) and not is_float(e.dtype) and not is_float(e.value.dtype):
        return bound(e.value, dom)
    if not isinstance(e, (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max)):
        return None
    if isinstance(e, (FloorDiv, FloorMod)):
        c = const_value(e.b)
        if c is None or c <= 0:
            return None
        if isinstance(e, FloorMod):
            reduced = _mod_reduced(e.a, c)
            if reduced is not e.a:
                return bound(_fold(FloorMod(reduced, e.b)), dom)
            return IntImm(0, e.dtype), IntImm(c - 1, e.dtype)
    ba, bb = bound(e.a, dom), bound(e.b, dom)
    if ba is None or bb is None:
        return None
    (la, ha), (lb, hb) = ba, bb
    if isinstance(e, Add):
        return canon(la + lb), canon(ha + hb)
    if isinstance(e, Sub):
        return canon(la - hb), canon(ha - lb)
    if isinstance(e, FloorDiv):
        return canon(FloorDiv(la, e.b)), canon(FloorDiv(ha, e.b))
    if isinstance(e, Min):
        return _min(la, lb), _min(ha, hb)
    if isinstance(e, Max):
        return _max(la, lb), _max(ha, hb)
    for (lo, hi), other in (((la, ha), e.b), ((lb, hb), e.a)):  # Mul: one side must be a constant
        c = const_value(other)
        if c is not None:
            return (canon(lo * c), canon(hi * c)) if c >= 0 else (canon(hi * c), canon(lo * c))
    return None


def union(a: Interval, b: Interval) -> Interval:
    return _min(a[0], b[0]), _max(a[1], b[1])

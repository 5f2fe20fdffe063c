"""The arithmetic simplifier: constant folding, canonical integer sums, div/mod, min/max and
comparison rules decided by bounds, vector (Ramp/Broadcast) algebra.

Every rule keeps the evaluator's meaning, integer wraparound included: sums are rewritten in
the dtype's ring (always exact), and rules that need true integer values (div, mod, min/max,
comparisons) fire only when bound analysis shows no operand wraps. `bounds` maps Vars to
inclusive (lo, hi) intervals, either side None for unbounded.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

from kiln.tir import expr as E
from kiln.tir.bound import BoundAnalyzer, Interval, VarBounds, fits
from kiln.tir.eval import INTRINSICS, eval_expr, wrap_int
from kiln.tir.expr import is_float, lanes_of
from kiln.tir.functor import Memo, children, map_expr, substitute, uses_var
from kiln.tir.poly import Mono, Poly, centered, exact_bound, from_poly, to_poly

_IMM = (E.IntImm, E.FloatImm)
_FOLD = (E.BinaryOp, E.CmpOp, E.And, E.Or, E.Not, E.Select, E.Cast)
_INT_DIV = (E.FloorDiv, E.FloorMod, E.TruncDiv, E.TruncMod, E.Div)
_NEGATE = {E.LT: E.GE, E.LE: E.GT, E.GT: E.LE, E.GE: E.LT, E.EQ: E.NE, E.NE: E.EQ}


def true_() -> E.IntImm:
    return E.IntImm(1, "bool")


def false_() -> E.IntImm:
    return E.IntImm(0, "bool")


def _int_scalar(dtype: str) -> bool:
    return lanes_of(dtype) == 1 and not is_float(dtype) and dtype != "bool"


def _cint(e: E.PrimExpr) -> int | None:
    return e.value if isinstance(e, E.IntImm) else None


def imm(value, dtype: str) -> E.PrimExpr:
    """An immediate of `dtype` holding a (numpy or Python) scalar value."""
    if is_float(dtype):
        return E.FloatImm(float(value), dtype)
    return E.IntImm(wrap_int(int(value), dtype), dtype)


class Simplifier:
    """Simplifies expressions under a set of Var bounds (`bind` adds or narrows one)."""

    def __init__(self, bounds: VarBounds | None = None):
        self.ba = BoundAnalyzer(bounds)
        # one memo per scope: a result depends only on the node and the bounds, which stay fixed
        # inside one scope, so the copies of an unrolled body (siblings in one scope) share their work
        self._memos: list[Memo] = [{}]

    @contextmanager
    def scope(self, v: E.Var, iv: tuple[int | None, int | None]) -> Iterator[None]:
        """A `with` block inside which `v` lies in the inclusive interval `iv`."""
        with self.ba.scope(v, *iv):
            self._memos.append({})
            try:
                yield
            finally:
                self._memos.pop()

    def __call__(self, e: E.PrimExpr) -> E.PrimExpr:
        return map_expr(e, self._rewrite, self._decided, self._memos[-1])

    @staticmethod
    def _decided(e: E.PrimExpr, go) -> E.PrimExpr | None:
        """A Select whose condition simplifies to a constant is its taken branch, the other never
        simplified: an unrolled Winograd tile picks one of 16-36 sums per statement this way, and
        simplifying every sum first made most of resnet50's lowering time."""
        if not isinstance(e, E.Select):
            return None
        c = _cint(go(e.cond))
        return None if c is None else go(e.t if c else e.f)

    def bound(self, e: E.PrimExpr) -> Interval:
        return self.ba(e)

    def prove(self, cond: E.PrimExpr) -> bool:
        return _cint(self(cond)) == 1

    def _rewrite(self, e: E.PrimExpr) -> E.PrimExpr | None:
        if isinstance(e, _FOLD) and lanes_of(e.dtype) == 1 and all(isinstance(c, _IMM) for c in children(e)):
            return self._fold(e)
        if isinstance(e, E.Call) and e.name in INTRINSICS and all(isinstance(c, _IMM) for c in e.args):
            return self._fold(e)
        rule = _RULES.get(type(e))
        return rule(self, e) if rule else None

    def _fold(self, e: E.PrimExpr) -> E.PrimExpr | None:
        if isinstance(e, _INT_DIV) and not is_float(e.dtype) and e.b.value == 0:
            return None  # undefined in C: leave it for the program to hit
        return imm(eval_expr(e), e.dtype)

    # integer sums ------------------------------------------------------------------------------
    def _exact(self, p: Poly) -> Interval | None:
        """Exact interval of a Poly's value, or None when its evaluation may wrap around."""
        iv = exact_bound(p, self.ba)
        return iv if fits(iv, p.dtype) else None

    def diff(self, a: E.PrimExpr, b: E.PrimExpr) -> Interval | None:
        """Interval of a - b in true integers, when neither a nor b wraps."""
        if not _int_scalar(a.dtype):
            return None
        pa, pb = to_poly(a), to_poly(b)
        if self._exact(pa) is None or self._exact(pb) is None:
            return None
        return exact_bound(pa.add(pb, -1, wrap=False), self.ba)

    def arith(self, e: E.BinaryOp) -> E.PrimExpr | None:
        if lanes_of(e.dtype) > 1:
            return self.vector(e)
        if _int_scalar(e.dtype):
            return self.sum(e)
        if is_float(e.dtype):
            return _float_identity(e)
        return None

    def sum(self, e: E.PrimExpr) -> E.PrimExpr:
        """The canonical sum of integer scalar `e`, its atoms taken as they are (already simplified):
        what a sum of simplified indices, such as a flat offset, needs."""
        return from_poly(self._merge_quotients(to_poly(e)))

    def _merge_quotients(self, p: Poly) -> Poly:
        """Quotient and remainder terms of one dividend merge back (`_merge_one`): the flat offset of a
        reshape's unraveled index, x // 204 * 3264 + (16x + i) // 68 % 48 * 68 + (16x + i) % 68, is 16x + i."""
        while True:
            for m, k in p.terms.items():
                merged = self._merge_one(p, m, k)
                if merged is not None:
                    p = merged
                    break
            else:
                return p

    def _merge_one(self, p: Poly, m: Mono, k: int) -> Poly | None:
        """With z = m = floormod(y, c) and k its coefficient: k*c*q + k*z -> k*y where q is floordiv(y, c) as
        this simplifier spells it (x // 204 for (16x + i) // 3264, i < 16); k*c*floormod(q, b) + k*z ->
        k*floormod(c*q + z, c*b) for any q (0 <= z < c). Either is taken only when it leaves fewer divisions,
        so merging ends."""
        c = _cint(m[0].b) if len(m) == 1 and isinstance(m[0], E.FloorMod) else None
        if c is None or c <= 1:
            return None
        kc = centered(k * c, p.dtype)
        partners = [t for t, v in p.terms.items() if t != m and centered(v - kc, p.dtype) == 0]
        if not partners:
            return None  # cheap test first: no term could be k*c times a quotient
        y, z = m[0].a, to_poly(m[0])
        rest = Poly(p.dtype, {t: v for t, v in p.terms.items() if t != m}, p.const)
        qp = to_poly(self(E.FloorDiv(y, m[0].b)))
        before = _divisions(from_poly(p))
        if qp.terms and all(centered(rest.terms.get(t, 0) - kc * v, p.dtype) == 0 for t, v in qp.terms.items()):
            merged = rest.add(qp, -kc).add(to_poly(y), k)  # y == c * (y // c) + y % c for every y
            return merged if _divisions(from_poly(merged)) < before else None
        for t in partners:
            b = _cint(t[0].b) if len(t) == 1 and isinstance(t[0], E.FloorMod) else None
            inner = to_poly(t[0].a).scale(c).add(z, wrap=False) if b is not None and b > 0 else None
            if inner is None or not fits((c * b, c * b), p.dtype):
                continue
            if t[0].a != E.FloorDiv(y, m[0].b) and self._exact(inner) is None:
                continue  # c*q + z must not wrap, unless it is y itself (an identity for every value)
            mod = self(E.FloorMod(from_poly(inner), E.IntImm(c * b, p.dtype)))
            merged = Poly(p.dtype, {u: w for u, w in rest.terms.items() if u != t}, p.const).add(to_poly(mod), k)
            if _divisions(from_poly(merged)) < before:
                return merged
        return None

    def floordiv(self, e: E.FloorDiv) -> E.PrimExpr | None:
        if lanes_of(e.dtype) > 1:
            return self.vector(e)
        c = _cint(e.b)
        if not _int_scalar(e.dtype) or c is None or c <= 0:
            return None
        if c == 1:
            return e.a
        p = to_poly(e.a)
        if self._exact(p) is None:
            return None
        p, c = _divide_gcd(p, c)
        if c == 1:
            return from_poly(p)
        aligned = self._aligned(p, c)
        if aligned is not None:
            return self(E.FloorDiv(from_poly(aligned[0]), E.IntImm(c // aligned[2], e.dtype)))
        q, r = _split(p, c)
        iv = self._exact(r)
        if iv is None:
            return E.FloorDiv(from_poly(p), E.IntImm(c, e.dtype))
        if iv[0] // c == iv[1] // c:
            return from_poly(q.add(Poly(p.dtype, {}, iv[0] // c)))
        inner = from_poly(r)
        if isinstance(inner, E.FloorDiv) and (a := _cint(inner.b)) and a > 0 and fits((a * c, a * c), e.dtype):
            return from_poly(q.add(to_poly(self(E.FloorDiv(inner.a, E.IntImm(a * c, e.dtype))))))
        return from_poly(q.add(Poly.atom(E.FloorDiv(inner, E.IntImm(c, e.dtype)))))

    def floormod(self, e: E.FloorMod) -> E.PrimExpr | None:
        if lanes_of(e.dtype) > 1:
            return self.vector(e)
        c = _cint(e.b)
        if not _int_scalar(e.dtype) or c is None or c <= 0:
            return None
        if c == 1:
            return E.IntImm(0, e.dtype)
        p = to_poly(e.a)
        if self._exact(p) is None:
            return None
        p, c2 = _divide_gcd(p, c)
        g = c // c2
        aligned = self._aligned(p, c2)
        if aligned is not None:
            hi, lo, g2 = aligned
            res = to_poly(self(E.FloorMod(from_poly(hi), E.IntImm(c2 // g2, e.dtype)))).scale(g2).add(lo, wrap=False)
            return from_poly(res if g == 1 else res.scale(g))
        r = _split(p, c2)[1] if c2 > 1 else Poly(p.dtype)
        r2 = self._drop_inner_mod(r, c2)
        if self._exact(r2) is not None:
            r = r2
        iv = self._exact(r)
        if iv is None:
            res = E.FloorMod(from_poly(p), E.IntImm(c2, e.dtype))
        elif iv[0] // c2 == iv[1] // c2:
            res = from_poly(r.add(Poly(p.dtype, {}, -c2 * (iv[0] // c2))))
        else:
            res = E.FloorMod(from_poly(r), E.IntImm(c2, e.dtype))
        return res if g == 1 else from_poly(to_poly(res).scale(g))

    def _aligned(self, p: Poly, c: int) -> tuple[Poly, Poly, int] | None:
        """(q, r, g) with p == g*q + r, g > 1 dividing c and 0 <= r < g, r the terms whose coefficients are
        coprime to c: then p // c == q // (c / g) and p % c == g * (q % (c / g)) + r. A flat index of a
        vectorized run, 8 * i + j // 384 with j < 8, is then i // 48: the loads of a reshape stay contiguous."""
        g = 0
        for k in p.terms.values():
            if math.gcd(k, c) > 1:
                g = math.gcd(g, k, c)
        if g <= 1:
            return None
        q = Poly(p.dtype, {m: k // g for m, k in p.terms.items() if k % g == 0}, p.const // g)
        r = Poly(p.dtype, {m: k for m, k in p.terms.items() if k % g}, p.const % g)
        if not r.terms:
            return None
        iv = self._exact(r)
        return (q, r, g) if iv is not None and iv[0] >= 0 and iv[1] < g else None

    def _drop_inner_mod(self, r: Poly, c: int) -> Poly:
        """floormod(x, a) == x (mod c) when c divides a: inside a floormod by c, use x itself
        (when x does not wrap, so that its Poly is its value)."""
        out = Poly(r.dtype, {}, r.const)
        for m, k in r.terms.items():
            a = m[0] if len(m) == 1 else None
            x = to_poly(a.a) if isinstance(a, E.FloorMod) and (_cint(a.b) or 1) % c == 0 else None
            if x is not None and self._exact(x) is not None:
                out = out.add(x, k, wrap=False)
            else:
                out = out.add(Poly(r.dtype, {m: k}), wrap=False)
        return out

    def truncdiv(self, e: E.PrimExpr) -> E.PrimExpr | None:
        """C division equals floor division when the dividend is non-negative."""
        if is_float(e.dtype):
            return _float_identity(e)
        if lanes_of(e.dtype) > 1 or (_cint(e.b) or 0) <= 0 or self.bound(e.a)[0] < 0:
            return None
        new = (E.FloorMod if isinstance(e, E.TruncMod) else E.FloorDiv)(e.a, e.b)
        r = self._rewrite(new)
        return new if r is None else r

    def minmax(self, e: E.Min | E.Max) -> E.PrimExpr | None:
        if e.a == e.b:
            return e.a
        if lanes_of(e.dtype) > 1:
            return self.vector(e)
        d = self.diff(e.a, e.b)
        if d is not None and (d[1] <= 0 or d[0] >= 0):
            return e.a if (d[1] <= 0) == isinstance(e, E.Min) else e.b
        a, b = e.a, e.b
        if isinstance(a, E.FloorDiv) and isinstance(b, E.FloorDiv) and a.b == b.b and (_cint(a.b) or 0) > 0:
            inner = self(type(e)(a.a, b.a))  # floordiv by a positive constant is monotone
            if not isinstance(inner, type(e)):
                return self(E.FloorDiv(inner, a.b))
        return None

    def compare(self, e: E.CmpOp) -> E.PrimExpr | None:
        if lanes_of(e.dtype) > 1:
            return self.vector(e)
        if e.a == e.b and not is_float(e.a.dtype):
            return true_() if isinstance(e, (E.EQ, E.LE, E.GE)) else false_()
        d = self.diff(e.a, e.b)
        if d is None:
            return None
        lo, hi = d
        decided = {E.LT: (hi < 0, lo >= 0), E.LE: (hi <= 0, lo > 0), E.GT: (lo > 0, hi <= 0),
                   E.GE: (lo >= 0, hi < 0), E.EQ: (lo == hi == 0, lo > 0 or hi < 0),
                   E.NE: (lo > 0 or hi < 0, lo == hi == 0)}[type(e)]
        return true_() if decided[0] else false_() if decided[1] else None

    # vectors -----------------------------------------------------------------------------------
    def vector(self, e: E.PrimExpr) -> E.PrimExpr | None:
        a, b, t = e.a, e.b, type(e)
        if isinstance(a, E.Broadcast) and isinstance(b, E.Broadcast):
            return E.Broadcast(self(t(a.value, b.value)), a.lanes)
        if is_float(e.dtype):
            return None
        ra, rb = isinstance(a, E.Ramp), isinstance(b, E.Ramp)
        if t in (E.Add, E.Sub) and (ra or rb):
            (base_a, s_a), (base_b, s_b) = _ramp_parts(a), _ramp_parts(b)
            return E.Ramp(self(t(base_a, base_b)), self(t(s_a, s_b)), a.lanes if ra else b.lanes)
        if t is E.Mul and ((ra and isinstance(b, E.Broadcast)) or (rb and isinstance(a, E.Broadcast))):
            r, k = (a, b.value) if ra else (b, a.value)
            return E.Ramp(self(E.Mul(r.base, k)), self(E.Mul(r.stride, k)), r.lanes)
        if t in (E.FloorDiv, E.FloorMod) and ra and isinstance(b, E.Broadcast):
            return self._ramp_divmod(e, a, b.value)
        return None

    def _ramp_divmod(self, e, r: E.Ramp, k: E.PrimExpr) -> E.PrimExpr | None:
        """floordiv/floormod of a ramp that stays inside one block of the divisor."""
        c, s = _cint(k), _cint(r.stride)
        if c is None or s is None or c <= 0 or s < 0:
            return None
        m = self(E.FloorMod(r.base, k))
        if self.bound(m)[1] + s * (r.lanes - 1) >= c or self._exact(to_poly(r.base)) is None:
            return None
        if isinstance(e, E.FloorDiv):
            return E.Broadcast(self(E.FloorDiv(r.base, k)), r.lanes)
        return E.Ramp(m, r.stride, r.lanes)

    # logic and the rest ------------------------------------------------------------------------
    def logic(self, e: E.PrimExpr) -> E.PrimExpr | None:
        if isinstance(e, E.Not):
            a = e.a
            if isinstance(a, E.Not):
                return a.a
            if type(a) in _NEGATE and not is_float(a.a.dtype):
                return _NEGATE[type(a)](a.a, a.b)
            return None
        a, b = e.a, e.b
        if a == b:
            return a
        absorb = 0 if isinstance(e, E.And) else 1  # false && x, true || x
        for x, y in ((a, b), (b, a)):
            if _cint(x) == absorb:
                return x
            if _cint(x) == 1 - absorb:
                return y
        return None

    def select(self, e: E.Select) -> E.PrimExpr | None:
        c = _cint(e.cond)
        if c is not None:
            return e.t if c else e.f
        return e.t if e.t == e.f else None

    def let(self, e: E.Let) -> E.PrimExpr | None:
        if isinstance(e.value, (E.Var, *_IMM)):
            return self(substitute(e.body, {e.var: e.value}))
        return None if uses_var(e.body, e.var) else e.body

    def cast(self, e: E.Cast) -> E.PrimExpr | None:
        return e.value if e.value.dtype == e.dtype else None

    def var(self, e: E.Var) -> E.PrimExpr | None:
        """A Var whose bounds pin it to one value is that value."""
        if e not in self.ba.bounds or not _int_scalar(e.dtype):
            return None
        lo, hi = self.ba.bounds[e]
        return E.IntImm(lo, e.dtype) if lo == hi else None

    def ramp(self, e: E.Ramp) -> E.PrimExpr | None:
        return E.Broadcast(e.base, e.lanes) if _cint(e.stride) == 0 else None


def _divisions(e: E.PrimExpr) -> int:
    """FloorDiv and FloorMod nodes of e as a tree (a shared node counts at each use)."""
    return isinstance(e, (E.FloorDiv, E.FloorMod)) + sum(_divisions(c) for c in children(e))


def _divide_gcd(p: Poly, c: int) -> tuple[Poly, int]:
    """floordiv(g*x, g*y) == floordiv(x, y): divide the Poly and the divisor by their gcd."""
    g = math.gcd(c, p.const, *p.terms.values())
    if g <= 1:
        return p, c
    return Poly(p.dtype, {m: k // g for m, k in p.terms.items()}, p.const // g), c // g


def _split(p: Poly, c: int) -> tuple[Poly, Poly]:
    """p == c*q + r with every coefficient of r in [0, c)."""
    q = Poly(p.dtype, {m: k // c for m, k in p.terms.items() if k // c}, p.const // c)
    r = Poly(p.dtype, {m: k % c for m, k in p.terms.items() if k % c}, p.const % c)
    return q, r


def _ramp_parts(x: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr]:
    if isinstance(x, E.Ramp):
        return x.base, x.stride
    v = x.value if isinstance(x, E.Broadcast) else x
    return v, E.IntImm(0, v.dtype)


def _float_identity(e: E.BinaryOp) -> E.PrimExpr | None:
    a, b = e.a, e.b
    one = lambda x: isinstance(x, E.FloatImm) and x.value == 1.0  # noqa: E731
    zero = lambda x: isinstance(x, E.FloatImm) and x.value == 0.0  # noqa: E731
    if isinstance(e, (E.Add, E.Sub)) and zero(b) or isinstance(e, (E.Mul, E.Div)) and one(b):
        return a
    if isinstance(e, E.Add) and zero(a) or isinstance(e, E.Mul) and one(a):
        return b
    return None


_RULES = {
    E.Add: Simplifier.arith, E.Sub: Simplifier.arith, E.Mul: Simplifier.arith,
    E.FloorDiv: Simplifier.floordiv, E.FloorMod: Simplifier.floormod,
    E.TruncDiv: Simplifier.truncdiv, E.TruncMod: Simplifier.truncdiv, E.Div: Simplifier.truncdiv,
    E.Min: Simplifier.minmax, E.Max: Simplifier.minmax,
    E.EQ: Simplifier.compare, E.NE: Simplifier.compare, E.LT: Simplifier.compare, E.LE: Simplifier.compare,
    E.GT: Simplifier.compare, E.GE: Simplifier.compare,
    E.And: Simplifier.logic, E.Or: Simplifier.logic, E.Not: Simplifier.logic,
    E.Var: Simplifier.var, E.Select: Simplifier.select, E.Let: Simplifier.let, E.Cast: Simplifier.cast,
    E.Ramp: Simplifier.ramp,
}


def simplify(e: E.PrimExpr, bounds: VarBounds | None = None) -> E.PrimExpr:
    """`e` simplified, given inclusive (lo, hi) bounds of its Vars."""
    return Simplifier(bounds)(e)


def prove(cond: E.PrimExpr, bounds: VarBounds | None = None) -> bool:
    """True when `cond` holds for every value of its Vars within `bounds` (False: not proven)."""
    return Simplifier(bounds).prove(cond)

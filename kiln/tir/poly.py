"""Canonical form of integer index expressions: a sum of monomials with combined coefficients.

A Poly is `const + sum(coeff * monomial)`, a monomial being a sorted tuple of atoms (Vars or
any non-arithmetic expression such as floordiv(i, 8) or a buffer load). Coefficients live in
Z/2^n (the dtype's ring), so rewriting through a Poly is exact even when the integer wraps
around; rules that need true integer values (div, mod, comparisons) ask `exact_bound` first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.tir import expr as E
from kiln.tir.bound import BoundAnalyzer, Interval, dtype_range, mul_iv
from kiln.tir.printer import expr_str

Mono = tuple[E.PrimExpr, ...]
MAX_TERMS = 64  # a product of sums with more terms than this stays an atom


def _key(atom: E.PrimExpr) -> tuple:
    if isinstance(atom, E.Var):
        return (0, atom.name, atom.uid)
    return (1, expr_str(atom), 0)


def _mono_key(m: Mono) -> tuple:
    return tuple(_key(a) for a in m)


def centered(v: int, dtype: str) -> int:
    """The representative of v mod 2^bits closest to zero (ties to the negative side)."""
    lo, hi = dtype_range(dtype)
    span = hi - lo + 1
    r = v % span
    return r - span if r >= span // 2 else r


@dataclass
class Poly:
    dtype: str
    terms: dict[Mono, int] = field(default_factory=dict)
    const: int = 0

    @staticmethod
    def atom(e: E.PrimExpr) -> Poly:
        return Poly(e.dtype, {(e,): 1})

    def copy(self) -> Poly:
        return Poly(self.dtype, dict(self.terms), self.const)

    def add(self, o: Poly, k: int = 1, wrap: bool = True) -> Poly:
        """self + k*o, in the dtype's ring (wrap) or in true integers (the value when nothing
        overflows; what div/mod/comparison reasoning needs)."""
        out = self.copy()
        for m, c in o.terms.items():
            out.terms[m] = out.terms.get(m, 0) + k * c
        out.const += k * o.const
        if wrap:
            return out.normalized()
        out.terms = {m: c for m, c in out.terms.items() if c}
        return out

    def scale(self, k: int) -> Poly:
        return Poly(self.dtype, {m: c * k for m, c in self.terms.items()}, self.const * k).normalized()

    def mul(self, o: Poly) -> Poly:
        out = Poly(self.dtype, {}, self.const * o.const)
        for m, c in self.terms.items():
            out.terms[m] = out.terms.get(m, 0) + c * o.const
        for m, c in o.terms.items():
            out.terms[m] = out.terms.get(m, 0) + c * self.const
        for m1, c1 in self.terms.items():
            for m2, c2 in o.terms.items():
                m = tuple(sorted(m1 + m2, key=_key))
                out.terms[m] = out.terms.get(m, 0) + c1 * c2
        return out.normalized()

    def normalized(self) -> Poly:
        terms = {m: centered(c, self.dtype) for m, c in self.terms.items()}
        return _merge_divmod(Poly(self.dtype, {m: c for m, c in terms.items() if c}, centered(self.const, self.dtype)))

    def is_const(self) -> bool:
        return not self.terms


def _merge_divmod(p: Poly) -> Poly:
    """k*floordiv(x, a)*a + k*floormod(x, a) -> k*x, and k*x - k*floordiv(x, a)*a -> k*floormod(x, a):
    the identity x = a*floordiv(x, a) + floormod(x, a) holds for every integer x."""
    for m, k in list(p.terms.items()):
        if len(m) != 1 or not isinstance(m[0], E.FloorMod) or not isinstance(m[0].b, E.IntImm):
            continue
        x, a = m[0].a, m[0].b
        fd = (E.FloorDiv(x, a),)
        if fd in p.terms and centered(p.terms[fd] - k * a.value, p.dtype) == 0:
            rest = Poly(p.dtype, {t: c for t, c in p.terms.items() if t not in (m, fd)}, p.const)
            return rest.add(to_poly(x), k)
    for m, kd in list(p.terms.items()):
        if len(m) != 1 or not isinstance(m[0], E.FloorDiv) or not isinstance(m[0].b, E.IntImm):
            continue
        x, a = m[0].a, m[0].b
        xp = to_poly(x)
        if len(xp.terms) != 1 or xp.const:
            continue
        (xm, xk), = xp.terms.items()
        k = p.terms.get(xm)
        if k is not None and xk == 1 and centered(kd + k * a.value, p.dtype) == 0:
            rest = Poly(p.dtype, {t: c for t, c in p.terms.items() if t not in (m, xm)}, p.const)
            return rest.add(Poly.atom(E.FloorMod(x, a)), k)
    return p


def to_poly(e: E.PrimExpr) -> Poly:
    """The canonical sum of an integer scalar expression (anything but + - * is an atom)."""
    if isinstance(e, E.IntImm):
        return Poly(e.dtype, {}, centered(e.value, e.dtype))
    if isinstance(e, E.Add):
        return to_poly(e.a).add(to_poly(e.b))
    if isinstance(e, E.Sub):
        return to_poly(e.a).add(to_poly(e.b), -1)
    if isinstance(e, E.Mul):
        a, b = to_poly(e.a), to_poly(e.b)
        if a.is_const() or b.is_const() or (len(a.terms) + 1) * (len(b.terms) + 1) <= MAX_TERMS:
            return a.mul(b)
    return Poly.atom(e)


def _mono_expr(m: Mono) -> E.PrimExpr:
    out = m[0]
    for a in m[1:]:
        out = E.Mul(out, a)
    return out


def from_poly(p: Poly) -> E.PrimExpr:
    """The expression of a Poly: positive terms first, in atom order, then subtractions, then
    the constant (`i*4 + j - k + 3`)."""
    p = p.normalized()
    hi = dtype_range(p.dtype)[1]
    items = sorted(p.terms.items(), key=lambda mc: _mono_key(mc[0]))
    pos = [(m, c) for m, c in items if c > 0]
    neg = [(m, c) for m, c in items if c < 0]
    out: E.PrimExpr | None = None
    if not pos and p.const > 0:
        out = E.IntImm(p.const, p.dtype)
    for m, c in pos + neg:
        t = _mono_expr(m)
        if c < 0 and out is not None and -c <= hi:
            out = E.Sub(out, t if c == -1 else E.Mul(t, E.IntImm(-c, p.dtype)))
            continue
        t = t if c == 1 else E.Mul(t, E.IntImm(c, p.dtype))
        out = t if out is None else E.Add(out, t)
    if out is None:
        return E.IntImm(p.const, p.dtype)
    if p.const > 0 and pos:
        out = E.Add(out, E.IntImm(p.const, p.dtype))
    elif p.const < 0:
        out = E.Sub(out, E.IntImm(-p.const, p.dtype)) if -p.const <= hi else E.Add(out, E.IntImm(p.const, p.dtype))
    return out


def exact_bound(p: Poly, ba: BoundAnalyzer) -> Interval:
    """Interval of the Poly's value computed without wraparound (atoms take their own bounds)."""
    lo = hi = p.const
    for m, c in p.terms.items():
        iv = (1, 1)
        for a in m:
            iv = mul_iv(iv, ba(a))
        t = mul_iv((c, c), iv)
        lo, hi = lo + t[0], hi + t[1]
    return (lo, hi)

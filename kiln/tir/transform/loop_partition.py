"""loop_partition: a loop whose body is guarded by an upper bound on its variable (the tail
guard `if (io*8 + ii < n)` of a non-divisible split) becomes a main loop without the guard and
a tail loop that keeps it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.arith import Simplifier
from kiln.tir.bound import BoundAnalyzer, fits
from kiln.tir.functor import free_vars, rebuild
from kiln.tir.poly import Poly, exact_bound, from_poly, to_poly
from kiln.tir.transform.simplify import NOP, loop_range, shape_bounds

_UPPER = (E.LT, E.LE, E.GT, E.GE)


def _conjuncts(c: E.PrimExpr) -> list[E.PrimExpr]:
    return _conjuncts(c.a) + _conjuncts(c.b) if isinstance(c, E.And) else [c]


def _guards(body: S.Stmt, v: E.Var, sim: Simplifier) -> list[tuple[S.IfThenElse, dict]]:
    """IfThenElse nodes in `body` whose condition reads `v`, each with the ranges of the loops
    between it and `body`'s loop."""
    out: list[tuple[S.IfThenElse, dict]] = []

    def go(s: S.Stmt, inner: dict) -> None:
        if isinstance(s, S.For):
            go(s.body, {**inner, s.loop_var: loop_range(sim, s.min, s.extent)})
            return
        if isinstance(s, S.IfThenElse) and v in free_vars(s.cond):
            out.append((s, inner))
        for name in ("then_case", "else_case", "body"):
            x = getattr(s, name, None)
            if isinstance(x, S.Stmt):
                go(x, inner)
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                go(x, inner)

    go(body, {})
    return out


@dataclass
class _Split:
    """The conjuncts of a guard that read v hold whenever v < point (for every value of the
    inner loop vars), and fail whenever v >= point if `exact`; `rest` are the other conjuncts."""

    point: E.PrimExpr
    exact: bool
    rest: list[E.PrimExpr]


def _split_point(cond: E.PrimExpr, v: E.Var, inner: dict, sim: Simplifier) -> _Split | None:
    """The split of a guard whose conjuncts on `v` are upper bounds affine in `v`, else None."""
    ba = BoundAnalyzer({**sim.ba.bounds, **inner})
    points, exact, rest = [], True, []
    for c in _conjuncts(cond):
        if v not in free_vars(c):
            rest.append(c)
            continue
        if type(c) not in _UPPER or not E.elem_of(c.a.dtype).startswith(("int", "uint")):
            return None
        a, b = (c.a, c.b) if isinstance(c, (E.LT, E.LE)) else (c.b, c.a)
        pa, pb = to_poly(a), to_poly(b)
        if not fits(exact_bound(pa, ba), a.dtype) or not fits(exact_bound(pb, ba), a.dtype):
            return None
        p = pa.add(pb, -1, wrap=False)  # cond is p <= k
        k = -1 if isinstance(c, (E.LT, E.GT)) else 0
        coef = p.terms.get((v,), 0)
        rest_in, rest_out = Poly(p.dtype), Poly(p.dtype, {}, p.const)
        for m, x in p.terms.items():
            used = set().union(*(free_vars(a) for a in m))
            if m == (v,):
                continue
            if v in used:
                return None
            (rest_in if used & inner.keys() else rest_out).terms[m] = x
        if coef <= 0:
            return None
        exact = exact and not rest_in.terms
        num = Poly(p.dtype, {}, k - exact_bound(rest_in, ba)[1]).add(rest_out, -1, wrap=False)
        if not fits(exact_bound(num, ba), p.dtype):
            return None
        points.append(E.FloorDiv(from_poly(num), E.IntImm(coef, p.dtype)) + 1)
    if not points:
        return None
    out = points[0]
    for x in points[1:]:
        out = E.Min(out, x)
    return _Split(out, exact, rest)


def _replace(s: S.Stmt, repl: dict[int, Callable[[S.IfThenElse], S.Stmt]]) -> S.Stmt:
    """`s` with each IfThenElse whose id is in `repl` rewritten by it."""
    if id(s) in repl:
        return repl[id(s)](s)
    return rebuild(s, lambda e: e, lambda x: _replace(x, repl))


def _in_main(split: _Split, repl: dict) -> Callable[[S.IfThenElse], S.Stmt]:
    """Below the split point only the guard's other conjuncts are left to test."""
    def f(g: S.IfThenElse) -> S.Stmt:
        then = _replace(g.then_case, repl)
        if not split.rest:
            return then
        cond = split.rest[0]
        for c in split.rest[1:]:
            cond = E.And(cond, c)
        return S.IfThenElse(cond, then, None if g.else_case is None else _replace(g.else_case, repl))
    return f


def _in_tail(repl: dict) -> Callable[[S.IfThenElse], S.Stmt]:
    return lambda g: NOP if g.else_case is None else _replace(g.else_case, repl)


def partition_stmt(s: S.Stmt, sim: Simplifier) -> S.Stmt:
    if not isinstance(s, S.For):
        return rebuild(s, lambda e: e, lambda x: partition_stmt(x, sim))
    v, lo, end = s.loop_var, s.min, sim(s.min + s.extent)
    with sim.scope(v, loop_range(sim, lo, s.extent)):
        found = [(g, _split_point(g.cond, v, inner, sim)) for g, inner in _guards(s.body, v, sim)]
    found = [(g, p) for g, p in found if p is not None]
    if not found:
        with sim.scope(v, loop_range(sim, lo, s.extent)):
            return S.For(v, lo, s.extent, s.kind, partition_stmt(s.body, sim), s.annotations)
    point = found[0][1].point
    for _, p in found[1:]:
        point = E.Min(point, p.point)
    mid = sim(E.Min(E.Max(point, lo), end))
    main: dict = {}
    main.update({id(g): _in_main(p, main) for g, p in found})
    tail_repl: dict = {}
    if all(p.exact and p.point == found[0][1].point for _, p in found):  # every guard fails past mid
        tail_repl.update({id(g): _in_tail(tail_repl) for g, _ in found})
    parts = []
    for a, b, body in ((lo, mid, _replace(s.body, main)), (mid, end, _replace(s.body, tail_repl))):
        ext = sim(b - a)
        if isinstance(ext, E.IntImm) and ext.value <= 0:
            continue
        with sim.scope(v, loop_range(sim, a, ext)):
            parts.append((a, ext, partition_stmt(body, sim)))
    if s.kind == S.ForKind.PARALLEL and len(parts) == 2:
        # one team over both parts: the tail as the last iterations of the parallel loop (a branch per
        # iteration), not a serial loop after it that one thread runs while the others wait at the next
        # loop. BERT's FFN-down (128 rows: 21 tiles of 6 rows + 2 rows, 2 threads) ran its 2-row tail on
        # one thread after every column block's 11 + 10 tiles
        (_, _, main_body), (_, _, tail_body) = parts
        return S.For(v, lo, s.extent, s.kind, S.IfThenElse(E.LT(v, mid), main_body, tail_body), s.annotations)
    return S.seq(*(S.For(v, a, ext, s.kind, body, s.annotations) for a, ext, body in parts))


def loop_partition(func: S.PrimFunc) -> S.PrimFunc:
    """Split loops at the point where their upper-bound guards stop holding."""
    body = partition_stmt(func.body, Simplifier(shape_bounds(func)))
    return func if body is func.body else S.PrimFunc(func.name, func.params, body, func.attrs)

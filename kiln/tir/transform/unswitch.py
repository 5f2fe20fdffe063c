"""unswitch: a vectorized (or simd) loop whose stores select on a condition that does not change inside the loop
becomes `if (cond) loop(then side) else loop(else side)`.

A concat is a select on the output index (`c < 8 ? a[..] : b[..]`); in NCHWc the condition is on the
channel block, fixed in the inner channel loop. gcc does not if-convert loads under a condition (they
may trap), so the select leaves the whole loop scalar ("control flow in loop"): 5.9 ms for a bilinear
2x upsample concatenated with a skip connection ([1, 96, 128, 128]) vs 1.3 ms unswitched, one core.
"""

from __future__ import annotations

from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.arith import Simplifier
from kiln.tir.functor import free_vars, map_expr, map_stmt, uses_var, walk

MAX_LOOPS = 8  # versions of one loop at most: independent conditions would multiply them


def _bound_inside(e: E.PrimExpr) -> set[E.Var]:
    return {x.var for x in walk(e) if isinstance(x, E.Let)}


def _invariant_cond(loop: S.For, stores: list[S.BufferStore]) -> E.PrimExpr | None:
    """The condition of a select in the stores that reads no buffer, not the loop variable and no
    variable bound inside the stores' values."""
    for st in stores:
        inner = _bound_inside(st.value)
        for x in walk(st.value):
            if not isinstance(x, E.Select) or uses_var(x.cond, loop.loop_var):
                continue
            if any(isinstance(y, E.BufferLoad) for y in walk(x.cond)) or free_vars(x.cond) & inner:
                continue
            return x.cond
    return None


def _decide(s: S.Stmt, cond: E.PrimExpr, side: bool) -> S.Stmt:
    """`s` with every select on `cond` replaced by its `side` branch."""
    def pick(e: E.PrimExpr) -> E.PrimExpr | None:
        if isinstance(e, E.Select) and e.cond == cond:  # post-order: its branches are decided already
            return e.t if side else e.f
        return None

    return map_stmt(s, fexpr=lambda e: map_expr(e, pick))


def _stores(body: S.Stmt) -> list[S.BufferStore] | None:
    xs = body.stmts if isinstance(body, S.SeqStmt) else (body,)
    return list(xs) if all(isinstance(x, S.BufferStore) for x in xs) else None


def _versions(loop: S.For, budget: list[int]) -> S.Stmt:
    stores = _stores(loop.body)
    cond = _invariant_cond(loop, stores) if stores else None
    if cond is None:
        return loop

    def version(side: bool) -> S.For:
        return S.For(loop.loop_var, loop.min, loop.extent, loop.kind, _decide(loop.body, cond, side), loop.annotations)

    known = Simplifier()(cond)
    if isinstance(known, E.IntImm):  # a constant (an unrolled index folded in): one version, no test
        return _versions(version(bool(known.value)), budget)
    if budget[0] < 1:
        return loop
    budget[0] -= 1
    return S.IfThenElse(cond, _versions(version(True), budget), _versions(version(False), budget))


def _unswitch(s: S.Stmt) -> S.Stmt | None:
    simd = isinstance(s, S.For) and (s.kind is S.ForKind.VECTORIZED
                                     or (s.kind is S.ForKind.SERIAL and ("simd", True) in s.annotations))
    if not simd:
        return None
    out = _versions(s, [MAX_LOOPS - 1])
    return None if out is s else out


def unswitch(func: S.PrimFunc) -> S.PrimFunc:
    """Hoist loop-invariant select conditions out of simd loops (see the module docstring)."""
    body = map_stmt(func.body, fstmt=_unswitch)
    return func if body is func.body else S.PrimFunc(func.name, func.params, body, func.attrs)

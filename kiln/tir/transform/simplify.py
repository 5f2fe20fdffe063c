"""simplify: every expression simplified under the bounds of its enclosing loops; loops of
extent 1 inlined, empty loops and decided conditionals removed."""

from __future__ import annotations

from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.arith import Simplifier
from kiln.tir.bound import is_int
from kiln.tir.functor import rebuild, substitute

NOP = S.SeqStmt(())


def is_nop(s: S.Stmt) -> bool:
    return isinstance(s, S.SeqStmt) and not s.stmts


def loop_range(sim: Simplifier, lo: E.PrimExpr, extent: E.PrimExpr) -> tuple[int, int]:
    """Inclusive interval of a loop variable running from `lo` for `extent` iterations."""
    if isinstance(lo, E.IntImm) and isinstance(extent, E.IntImm):
        return lo.value, lo.value + extent.value - 1
    return sim.bound(lo)[0], sim.bound(sim(lo + extent - 1))[1]


def simplify_stmt(s: S.Stmt, sim: Simplifier) -> S.Stmt:
    if isinstance(s, S.For):
        lo, ext = sim(s.min), sim(s.extent)
        if isinstance(ext, E.IntImm) and ext.value <= 0:
            return NOP
        if isinstance(ext, E.IntImm) and ext.value == 1:
            return simplify_stmt(substitute(s.body, {s.loop_var: lo}), sim)
        with sim.scope(s.loop_var, loop_range(sim, lo, ext)):
            body = simplify_stmt(s.body, sim)
        return NOP if is_nop(body) else S.For(s.loop_var, lo, ext, s.kind, body, s.annotations)
    if isinstance(s, S.IfThenElse):
        c = sim(s.cond)
        if isinstance(c, E.IntImm):
            taken = s.then_case if c.value else s.else_case
            return NOP if taken is None else simplify_stmt(taken, sim)
        then = simplify_stmt(s.then_case, sim)
        other = None if s.else_case is None else simplify_stmt(s.else_case, sim)
        other = None if other is not None and is_nop(other) else other
        if is_nop(then) and other is None:
            return NOP
        return S.IfThenElse(c, then, other)
    if isinstance(s, S.LetStmt):
        v = sim(s.value)
        if isinstance(v, (E.Var, E.IntImm, E.FloatImm)):
            return simplify_stmt(substitute(s.body, {s.var: v}), sim)
        if not is_int(v.dtype):
            return S.LetStmt(s.var, v, simplify_stmt(s.body, sim))
        with sim.scope(s.var, sim.bound(v)):
            return S.LetStmt(s.var, v, simplify_stmt(s.body, sim))
    if isinstance(s, S.SeqStmt):
        return S.seq(*(x for x in (simplify_stmt(x, sim) for x in s.stmts) if not is_nop(x))) if s.stmts else s
    if isinstance(s, S.Allocate):
        body = simplify_stmt(s.body, sim)
        return NOP if is_nop(body) else S.Allocate(s.buffer, body)
    return rebuild(s, sim, lambda x: simplify_stmt(x, sim))


# NOTE: an assumption, not a fact of the IR: no tensor dimension reaches 2^40 elements. It lets
# index arithmetic on symbolic sizes (n + 3, n * 4) be proven free of wraparound.
MAX_DIM = 2**40


def shape_bounds(func: S.PrimFunc) -> dict[E.Var, tuple[int, int]]:
    """Vars that are whole dimensions of a parameter buffer are sizes: in [0, MAX_DIM]."""
    return {d: (0, MAX_DIM) for p in func.params if isinstance(p, S.Buffer) for d in p.shape if isinstance(d, E.Var)}


def simplify(func: S.PrimFunc) -> S.PrimFunc:
    """Simplify every expression of `func` using loop bounds; drop dead loops and decided ifs."""
    body = simplify_stmt(func.body, Simplifier(shape_bounds(func)))
    return func if body is func.body else S.PrimFunc(func.name, func.params, body, func.attrs)

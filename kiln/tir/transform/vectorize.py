"""vectorize: a VECTORIZED loop of constant extent becomes vector code (Ramp/Broadcast lanes)
when every access is contiguous or invariant along the loop; otherwise it stays a SERIAL loop
annotated ("simd", True) for the backend to emit `#pragma omp simd`."""

from __future__ import annotations

from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.arith import Simplifier
from kiln.tir.eval import INTRINSICS
from kiln.tir.expr import lanes_of, with_lanes
from kiln.tir.functor import map_stmt, uses_var

MAX_LANES = 64


class _Scalar(Exception):
    """The loop body cannot be written as vector code."""


class _Vectorizer:
    def __init__(self, loop: S.For, lanes: int):
        self.v, self.lanes = loop.loop_var, lanes
        self.ramp = E.Ramp(loop.min, E.IntImm(1, loop.min.dtype), lanes)
        self.sim = Simplifier()
        self.loads: list[tuple[S.Buffer, tuple]] = []

    def widen(self, x: E.PrimExpr) -> E.PrimExpr:
        return x if lanes_of(x.dtype) > 1 else E.Broadcast(x, self.lanes)

    def expr(self, e: E.PrimExpr) -> E.PrimExpr:
        """Vector form of `e`, or `e` itself when it does not depend on the loop variable."""
        if not uses_var(e, self.v):
            return e
        if e is self.v:
            return self.ramp
        if isinstance(e, (E.BinaryOp, E.CmpOp, E.And, E.Or)):
            a, b = self.expr(e.a), self.expr(e.b)
            return self.sim(type(e)(self.widen(a), self.widen(b)))
        if isinstance(e, E.Not):
            return E.Not(self.expr(e.a))
        if isinstance(e, E.Select):
            return E.Select(*(self.widen(self.expr(x)) for x in (e.cond, e.t, e.f)))
        if isinstance(e, E.Cast):
            return E.Cast(with_lanes(e.dtype, self.lanes), self.expr(e.value))
        if isinstance(e, E.Call) and e.name in INTRINSICS:
            args = tuple(self.widen(self.expr(a)) for a in e.args)
            return E.Call(with_lanes(e.dtype, self.lanes), e.name, args)
        if isinstance(e, E.BufferLoad):
            idx = self.access(e.buffer, e.indices)
            self.loads.append((e.buffer, idx))
            return E.BufferLoad(e.buffer, idx)
        raise _Scalar(type(e).__name__)

    def access(self, buf: S.Buffer, indices) -> tuple[E.PrimExpr, ...]:
        """Indices of a contiguous (or invariant) access; _Scalar for a gather/scatter."""
        idx = [self.expr(i) for i in indices]
        idx = [i.value if isinstance(i, E.Broadcast) else i for i in idx]
        *outer, last = idx
        if any(lanes_of(i.dtype) > 1 for i in outer):
            raise _Scalar("non-contiguous access")
        if lanes_of(last.dtype) == 1:
            return tuple(idx)
        unit = isinstance(last, E.Ramp) and isinstance(last.stride, E.IntImm) and last.stride.value == 1
        inner_stride = buf.strides[-1] if buf.strides is not None else E.IntImm(1)
        if not unit or not (isinstance(inner_stride, E.IntImm) and inner_stride.value == 1):
            raise _Scalar("non-contiguous access")
        return tuple(idx)

    def body(self, s: S.Stmt) -> S.Stmt:
        """The vector form of a loop body; a buffer read at other elements than it is written
        may carry a dependence between iterations, so it keeps the loop scalar."""
        out = self.stmt(s)
        stores = {(x.buffer, x.indices) for x in (out.stmts if isinstance(out, S.SeqStmt) else (out,))}
        written = {b for b, _ in stores}
        if any(b in written and (b, idx) not in stores for b, idx in self.loads):
            raise _Scalar("a buffer read and written at different elements")
        return out

    def stmt(self, s: S.Stmt) -> S.Stmt:
        if isinstance(s, S.SeqStmt):
            return S.SeqStmt(tuple(self.stmt(x) for x in s.stmts))
        if isinstance(s, S.BufferStore):
            idx = self.access(s.buffer, s.indices)
            if all(lanes_of(i.dtype) == 1 for i in idx):
                raise _Scalar("store to the same element on every lane")
            return S.BufferStore(s.buffer, self.widen(self.expr(s.value)), idx)
        raise _Scalar(type(s).__name__)


def _vectorize(s: S.Stmt) -> S.Stmt | None:
    if not (isinstance(s, S.For) and s.kind is S.ForKind.VECTORIZED):
        return None
    n = s.extent.value if isinstance(s.extent, E.IntImm) else 0
    if 2 <= n <= MAX_LANES:
        try:
            return _Vectorizer(s, n).body(s.body)
        except _Scalar:
            pass
    return S.For(s.loop_var, s.min, s.extent, S.ForKind.SERIAL, s.body, s.annotations + (("simd", True),))


def vectorize(func: S.PrimFunc) -> S.PrimFunc:
    """Turn VECTORIZED loops into vector statements, or SERIAL loops marked simd."""
    body = map_stmt(func.body, fstmt=_vectorize)
    return func if body is func.body else S.PrimFunc(func.name, func.params, body, func.attrs)

"""unroll: an UNROLLED loop of constant extent becomes its body repeated, once per index value.
Loops whose extent is not constant stay UNROLLED (a hint for the backend)."""

from __future__ import annotations

from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.functor import instances, map_stmt


def _unroll(s: S.Stmt) -> S.Stmt | None:
    if not (isinstance(s, S.For) and s.kind is S.ForKind.UNROLLED and isinstance(s.extent, E.IntImm)):
        return None
    lo = s.min
    index = (lambda k: E.IntImm(lo.value + k, lo.dtype)) if isinstance(lo, E.IntImm) else (lambda k: lo + k)
    return S.seq(*instances(s.body, s.loop_var, (index(k) for k in range(s.extent.value))))


def unroll(func: S.PrimFunc) -> S.PrimFunc:
    """Replace every constant-extent UNROLLED loop by copies of its body (inner loops first)."""
    body = map_stmt(func.body, fstmt=_unroll)
    return func if body is func.body else S.PrimFunc(func.name, func.params, body, func.attrs)

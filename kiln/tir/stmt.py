"""Statements of the loop IR: buffers, loops, stores, allocation, conditionals; and PrimFunc."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Any

from kiln.tir.expr import PrimExpr, Var

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Buffer:
    """A multi-dimensional array in memory: shape may hold Vars (symbolic dims). Row-major unless
    `strides` is given. scope: "global" (arguments, arena), "local" (a kernel's temporary)."""

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str
    strides: tuple[PrimExpr, ...] | None = None
    scope: str = "global"
    uid: int = field(default_factory=lambda: next(_ids), repr=False)

    def __repr__(self) -> str:
        return self.name

    def __getitem__(self, idx) -> PrimExpr:
        from kiln.tir.expr import BufferLoad, const

        idx = idx if isinstance(idx, tuple) else (idx,)
        return BufferLoad(self, tuple(const(i) for i in idx))


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"


class Stmt:
    def __str__(self) -> str:
        from kiln.tir.printer import to_str

        return to_str(self)


@dataclass(frozen=True)
class BufferStore(Stmt):
    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]


@dataclass(frozen=True)
class For(Stmt):
    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    annotations: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class IfThenElse(Stmt):
    cond: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True)
class LetStmt(Stmt):
    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True)
class Allocate(Stmt):
    """`buffer` exists (uninitialized) inside `body`."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True)
class Evaluate(Stmt):
    """Evaluate an expression for its effect (a call into the runtime library)."""

    value: PrimExpr


@dataclass(frozen=True)
class PrimFunc:
    """A kernel: buffers in, buffers out (outputs are written, never read before written).
    `params` are Buffers and scalar Vars (symbolic dims passed at run time)."""

    name: str
    params: tuple[Buffer | Var, ...]
    body: Stmt
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)

    def __str__(self) -> str:
        from kiln.tir.printer import to_str

        return to_str(self)


def seq(*stmts: Stmt) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.stmts if isinstance(s, SeqStmt) else (s,))
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))

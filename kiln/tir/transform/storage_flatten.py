"""storage_flatten: multi-dimensional buffers become 1-D; every access becomes one flat index
computed from the buffer's shape (row-major) or explicit strides."""

from __future__ import annotations

from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.arith import simplify
from kiln.tir.expr import lanes_of
from kiln.tir.functor import map_expr, map_stmt, walk


def _strides(b: S.Buffer) -> list[E.PrimExpr]:
    if b.strides is not None:
        return list(b.strides)
    out: list[E.PrimExpr] = []
    acc: E.PrimExpr = E.IntImm(1, b.shape[-1].dtype if b.shape else "int64")
    for d in reversed(b.shape):
        out.append(acc)
        acc = d if isinstance(acc, E.IntImm) and acc.value == 1 else acc * d
    return out[::-1]


def _like(x: E.PrimExpr, ref: E.PrimExpr) -> E.PrimExpr:
    """`x` converted to `ref`'s element dtype and broadcast to its lanes."""
    dt = E.elem_of(ref.dtype)
    if E.elem_of(x.dtype) != dt:
        x = E.IntImm(x.value, dt) if isinstance(x, E.IntImm) else E.Cast(dt, x)
    lanes = lanes_of(ref.dtype)
    return E.Broadcast(x, lanes) if lanes > 1 and lanes_of(x.dtype) == 1 else x


def flat_index(b: S.Buffer, indices: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
    """sum(index_k * stride_k), in the dtype and lanes of the widest index."""
    if not indices:
        return E.IntImm(0, "int64")
    ref = max(indices, key=lambda i: lanes_of(i.dtype))
    out: E.PrimExpr | None = None
    for i, s in zip(indices, _strides(b)):
        i = _like(i, ref)
        term = i if isinstance(s, E.IntImm) and s.value == 1 else E.Mul(i, _like(s, i))
        out = term if out is None else E.Add(out, term)
    return out


def _flat_size(b: S.Buffer) -> E.PrimExpr:
    if not b.shape:
        return E.IntImm(1, "int64")
    if b.strides is None:
        size = b.shape[0]
        for d in b.shape[1:]:
            size = size * d
        return size
    size: E.PrimExpr = E.IntImm(1, b.shape[0].dtype)
    for d, s in zip(b.shape, b.strides):
        size = size + (d - 1) * s
    return size


def storage_flatten(func: S.PrimFunc) -> S.PrimFunc:
    """Rewrite every buffer of `func` (parameters and allocations) to one dimension. Buffers handed
    to runtime-library calls keep their shape: those functions read it from the descriptor."""
    new: dict[S.Buffer, S.Buffer] = {}
    extern = _extern_buffers(func.body)

    def flat(b: S.Buffer) -> S.Buffer:
        if b not in new:
            keep = (len(b.shape) == 1 and b.strides is None) or b in extern
            new[b] = b if keep else S.Buffer(b.name, (simplify(_flat_size(b)),), b.dtype, None, b.scope)
        return new[b]

    def fexpr(e: E.PrimExpr) -> E.PrimExpr:
        return map_expr(e, lambda x: E.BufferLoad(flat(x.buffer), (flat_index(x.buffer, x.indices),))
                        if isinstance(x, E.BufferLoad) and flat(x.buffer) is not x.buffer else None)

    def fstmt(s: S.Stmt) -> S.Stmt | None:
        if isinstance(s, S.BufferStore) and flat(s.buffer) is not s.buffer:
            return S.BufferStore(flat(s.buffer), s.value, (flat_index(s.buffer, s.indices),))
        if isinstance(s, S.Allocate) and flat(s.buffer) is not s.buffer:
            return S.Allocate(flat(s.buffer), s.body)
        return None

    body = map_stmt(func.body, fexpr, fstmt)
    params = tuple(flat(p) if isinstance(p, S.Buffer) else p for p in func.params)
    return S.PrimFunc(func.name, params, body, func.attrs)


def _extern_buffers(body: S.Stmt) -> set[S.Buffer]:
    """Buffers passed whole to a call (Evaluate(Call(f, buffer, ...)) of the runtime library)."""
    return {a for x in walk(body) if isinstance(x, E.Call) for a in x.args if isinstance(a, S.Buffer)}

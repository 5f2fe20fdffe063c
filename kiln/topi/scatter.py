"""Scatters as computes: each output element reduces, over all update positions, the updates
addressed to it (a conditional reduction), then combines them with the data element.

reduction="none" keeps the last update in loop order (numpy's assignment does the same); the
others combine data with the sum/product/max/min of the updates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln import te, tir
from kiln.te.tensor import CommReducer
from kiln.tir import PrimExpr, select
from kiln.topi.injective import checked_index
from kiln.topi.registry import ComputeError, register_compute

# (found, value): the later of two found updates wins
LAST = CommReducer("last", lambda fa, va, fb, vb: (fa | fb, tir.Select(fb, vb, va)),
                   lambda df, dv: (tir.const(False), tir.const(0, dv)))


def scatter_compute(data: te.Tensor, extents: Sequence[PrimExpr], hit: Callable, update: Callable,
                    reduction: str, name: str) -> te.Tensor:
    """out[i] = data[i] combined with update(i, ks) over reduce positions ks where hit(i, ks)."""
    def f(*i):
        ks = [te.reduce_axis(e, f"r{n}") for n, e in enumerate(extents)]
        vs = [k.var for k in ks]
        cond, upd = hit(i, vs), update(i, vs)
        if reduction == "none":
            return LAST((tir.const(True), upd), ks, where=cond)
        red = {"add": te.sum, "mul": te.prod, "max": te.max, "min": te.min}[reduction]
        return red(upd, ks, where=cond)

    acc = te.compute(data.shape, f, name=f"{name}_acc")
    if reduction == "none":
        found, val = acc
        return te.compute(data.shape, lambda *i: select(found(*i), val(*i), data(*i)), name=name)
    comb = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": tir.max_, "min": tir.min_}[reduction]
    return te.compute(data.shape, lambda *i: comb(data(*i), acc(*i)), name=name)


def _clamp(v: PrimExpr, n: PrimExpr) -> PrimExpr:
    return tir.min_(v, n - 1)


@register_compute("tensor.scatter_elements")
def _scatter_elements(attrs, inputs, out_type, consts):
    data, idx, upd = inputs[:3]
    axis = attrs.axis % data.ndim

    def pos(i, vs):
        """The update position r along axis, i elsewhere (clamped into the updates' shape)."""
        return [vs[0] if a == axis else _clamp(v, idx.shape[a]) for a, v in enumerate(i)]

    def hit(i, vs):
        inside = [i[a] < idx.shape[a] for a in range(data.ndim) if a != axis]
        return tir.all_of(inside + [tir.eq(checked_index(idx(*pos(i, vs)), data.shape[axis]), i[axis])])

    return scatter_compute(data, [idx.shape[axis]], hit, lambda i, vs: upd(*pos(i, vs)), attrs.reduction,
                           "scatter_elements")


@register_compute("tensor.scatter_nd")
def _scatter_nd(attrs, inputs, out_type, consts):
    data, idx, upd = inputs[:3]
    k = idx.shape[-1]
    if not isinstance(k, tir.IntImm):
        raise ComputeError("tensor.scatter_nd: the index depth must be static")
    k = k.value

    def hit(i, vs):
        return tir.all_of([tir.eq(checked_index(idx(*vs, tir.const(t)), data.shape[t]), i[t]) for t in range(k)])

    return scatter_compute(data, idx.shape[:-1], hit, lambda i, vs: upd(*vs, *i[k:]), attrs.reduction, "scatter_nd")

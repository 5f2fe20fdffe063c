"""MatMulInteger (kiln/op/linalg.py): (A - a_zero_point) @ (B - b_zero_point) summed exactly in int32.

Zero points broadcast against their operand as in the reference (numpy rules), except that a 1-D
a_zero_point with a matrix A is one value per row of A. A zero point that would broadcast its operand
to a larger shape has no compute (the type relation does not describe that result either).
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln import te, tir
from kiln.tir import PrimExpr
from kiln.topi.registry import ComputeError, is_one, out_dims, register_compute

NAME = "linalg.mat_mul_integer"
I32 = "int32"


def _fits(zp_dim: PrimExpr, x_dim: PrimExpr) -> bool:
    if is_one(zp_dim) or zp_dim is x_dim:
        return True
    return isinstance(zp_dim, tir.IntImm) and isinstance(x_dim, tir.IntImm) and zp_dim.value == x_dim.value


def zero_point_at(zp: te.Tensor | None, x: te.Tensor, idx: Sequence[PrimExpr], per_row: bool,
                  what: str) -> PrimExpr:
    """The int32 zero point subtracted from x at index idx (0 when absent)."""
    if zp is None:
        return tir.const(0, I32)
    if per_row and zp.ndim == 1 and x.ndim >= 2:
        if not _fits(zp.shape[0], x.shape[-2]):
            raise ComputeError(f"{NAME}: {what} of shape {zp.shape} is not one per row of A {x.shape}")
        return tir.cast(I32, zp(tir.const(0) if is_one(zp.shape[0]) else idx[-2]))
    off = x.ndim - zp.ndim
    if off < 0 or not all(_fits(d, x.shape[off + k]) for k, d in enumerate(zp.shape)):
        raise ComputeError(f"{NAME}: {what} of shape {zp.shape} does not broadcast into its operand {x.shape}")
    return tir.cast(I32, zp(*(tir.const(0) if is_one(d) else idx[off + k] for k, d in enumerate(zp.shape))))


@register_compute(NAME)
def _mat_mul_integer(attrs, inputs, out_type, consts):
    a, b, a_zp, b_zp = inputs[:4]
    for t, what in ((a, "A"), (b, "B")):
        if t.dtype not in ("int8", "uint8"):
            raise ComputeError(f"{NAME}: {what} dtype {t.dtype} has no compute")
    shape = out_dims(out_type, inputs)
    k = te.reduce_axis(a.shape[-1], "k")
    nb = len(shape) - (a.ndim > 1) - (b.ndim > 1)  # batch dims of the output

    def index(x: te.Tensor, batch: Sequence[PrimExpr], mat: list[PrimExpr]) -> list[PrimExpr]:
        """x's index: its batch dims (broadcast, right-aligned) then its matrix index."""
        xb = x.ndim - 2 if x.ndim > 1 else 0
        return [tir.const(0) if is_one(x.shape[d]) else batch[nb - xb + d] for d in range(xb)] + mat

    def f(*i):
        batch = i[:nb]
        ia = index(a, batch, ([i[nb]] if a.ndim > 1 else []) + [k.var])
        ib = index(b, batch, [k.var] + ([i[-1]] if b.ndim > 1 else []))
        va = tir.cast(I32, a(*ia)) - zero_point_at(a_zp, a, ia, True, "a_zero_point")
        vb = tir.cast(I32, b(*ib)) - zero_point_at(b_zp, b, ib, False, "b_zero_point")
        return te.sum(va * vb, k)

    acc = te.compute(shape, f, name="matmul_integer_acc")
    # NOTE: a reduction plus an elementwise output, the shape the dense schedules take
    return te.compute(shape, lambda *i: acc(*i), name="matmul_integer")

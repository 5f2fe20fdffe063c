"""The compute of quant.qgemm (kiln/op/qgemm.py) on x86: the int32 products as a loop nest over
register tiles, each tile one call of the micro-kernel intrinsic `kiln_i8_tile_<kernel>`
(kiln/codegen/kiln_int8.h, spelled by kiln/codegen/intrinsics.py), then the epilogue as an ordinary
te compute (zero-point correction, scales, bias, rounding, saturation) that the schedule vectorizes.

This is tensorize in the TVM sense: the tile loops (rows of A by the kernel's MR, columns by its
panel width nr, the whole depth K) are replaced by one intrinsic, and the loops around it are tir
with tuning knobs: `qgemm.block_rows` (rows of A one task walks, kept in L2 while every panel of the
task passes) and `qgemm.block_panels` (panels per task; a panel stays in L1 across the task's rows).
The parallel loop runs over the (row block, panel block) pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kiln import te, tir
from kiln.op.qgemm import KERNELS, NAME, QGemmAttrs, unpack_weight
from kiln.te.tensor import ExternOp
from kiln.tir.expr import BufferLoad, Call, PrimExpr, Var
from kiln.tir.stmt import Buffer, Evaluate, For, ForKind, IfThenElse, Stmt
from kiln.topi.knobs import knob
from kiln.topi.registry import register_compute

TILE_INTRINSICS = {k: f"kiln_i8_tile_{k}" for k in KERNELS}
I32, I64, F32 = "int32", "int64", "float32"


def _row_index(shape: Sequence[PrimExpr], m: PrimExpr) -> list[PrimExpr]:
    """The leading indices of flat row m of a [..., K] tensor."""
    lead = list(shape[:-1])
    idx: list[PrimExpr] = []
    for k in range(len(lead) - 1, 0, -1):
        idx.append(m % lead[k])
        m = m // lead[k]
    return [m, *reversed(idx)] if lead else []


@dataclass(frozen=True, eq=False, kw_only=True)
class Int8TileOp(ExternOp):
    """acc[..., n] = sum_k A'[..., k] * W[k, n], A' the activations as uint8 (int8 with the sign bit
    flipped, that is + 128): a tir loop nest around the micro-kernel intrinsic."""

    kernel: str
    depth: int
    units: int
    block_rows: int
    block_panels: int
    flip: bool

    def lower_stmt(self, ins: Sequence[Buffer], outs: Sequence[Buffer]) -> Stmt:
        a, w = ins
        c = outs[0]
        nr, mr = KERNELS[self.kernel]
        rows = math.prod(a.shape[:-1], start=tir.const(1)) if a.shape[:-1] else tir.const(1)
        panels = -(-self.units // nr)
        n_blocks = -(-panels // self.block_panels)
        t, p, r = Var("qgemm_task", I64), Var("qgemm_panel", I64), Var("qgemm_rows", I64)
        m0 = (t // n_blocks) * self.block_rows + r * mr
        panel = (t % n_blocks) * self.block_panels + p
        call = Call(I32, TILE_INTRINSICS[self.kernel], (
            BufferLoad(a, (*_row_index(a.shape, m0), tir.const(0))), tir.const(self.depth),
            tir.min_(tir.const(mr), rows - m0),
            BufferLoad(w, (panel, tir.const(0), tir.const(0), tir.const(0))), tir.const(self.depth),
            BufferLoad(c, (*_row_index(c.shape, m0), panel * nr)), tir.const(self.units),
            tir.min_(tir.const(nr), self.units - panel * nr), tir.const(int(self.flip), I32)))
        body: Stmt = IfThenElse(tir.And(m0 < rows, panel < panels), Evaluate(call))
        body = For(r, tir.const(0), tir.const(self.block_rows // mr), ForKind.SERIAL, body)
        body = For(p, tir.const(0), tir.const(self.block_panels), ForKind.SERIAL, body)
        tasks = ((rows + (self.block_rows - 1)) // self.block_rows) * n_blocks
        return For(t, tir.const(0), tasks, ForKind.PARALLEL, body)

    def evaluate(self, ins: Sequence[np.ndarray], sizes: dict) -> list[np.ndarray]:
        a, w = ins
        rows = a.reshape(-1, self.depth).astype(np.int64) + (128 if self.flip else 0)
        acc = rows @ unpack_weight(w, self.depth, self.units).astype(np.int64)
        return [acc.astype(np.int32).reshape(a.shape[:-1] + (self.units,))]


def _scalar(p: te.Tensor) -> PrimExpr:
    return p(*(tir.const(0) for _ in p.shape))


def _epilogue(attrs: QGemmAttrs, acc: te.Tensor, params: Sequence[te.Tensor], shift: int) -> te.Tensor:
    """kiln/op/qgemm.py's epilogue on the raw products (whose zero point is a_zero_point + shift)."""
    wsum, a_zp, a_scale, col_scale, col_bias = params
    out = attrs.out_dtype

    def f(*i):
        n = i[-1]
        v = acc(*i) - (tir.cast(I32, _scalar(a_zp)) + shift) * wsum(n)
        if out == I32:
            return v
        y = tir.cast(F32, v) * (tir.cast(F32, _scalar(a_scale)) * col_scale(n)) + col_bias(n)
        if out == F32:
            return tir.max_(y, tir.const(0.0, F32)) if attrs.relu else y
        info = np.iinfo(out)
        lo = max(int(info.min), attrs.y_zero_point) if attrs.relu else int(info.min)
        q = te.nearbyint(y) + tir.const(float(attrs.y_zero_point), F32)
        q = tir.max_(tir.min_(q, tir.const(float(info.max), F32)), tir.const(float(lo), F32))
        return tir.cast(out, q)

    return te.compute(acc.shape, f, name="qgemm")


@register_compute(NAME)
def _qgemm(attrs: QGemmAttrs, inputs, out_type, consts):
    a, w = inputs[0], inputs[1]
    mr = KERNELS[attrs.kernel][1]
    block_rows = knob("qgemm.block_rows", (mr * 4, mr * 8, mr * 16, mr * 32), mr * 16)
    block_panels = knob("qgemm.block_panels", (1, 2, 4, 8), 4)
    flip = a.dtype == "int8"
    op = Int8TileOp("qgemm_acc", (a, w), (tuple(a.shape[:-1]) + (tir.const(attrs.units),),), (I32,),
                    TILE_INTRINSICS[attrs.kernel], kernel=attrs.kernel, depth=attrs.depth, units=attrs.units,
                    block_rows=block_rows, block_panels=block_panels, flip=flip)
    return _epilogue(attrs, op.output(0), inputs[2:], 128 if flip else 0)

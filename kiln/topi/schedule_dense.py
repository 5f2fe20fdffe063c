"""Default x86 schedule of a matrix-product group (mat_mul, batched mat_mul, gemm).

The output is tiled into (row, column) blocks, run in parallel with the batch dims; each block
accumulates in a local buffer and is stored once through the fused epilogue (bias, alpha/beta,
activation). When every operand is contiguous along the output columns (B[k, j]) the block is
rows x a vectorized run of columns with k outside it; when an operand is read across rows
(B[j, k], Gemm's transB) a column-vectorized loop would gather, so k stays contiguous and a few
columns are unrolled inside it as independent accumulation chains.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.te.bound import canon
from kiln.te.schedule import Schedule
from kiln.te.tensor import IterVar, Tensor
from kiln.topi.schedule_anchor import (Anchor, anchor_stages, block, data_size, loads_of, materialize, parallel_outer,
                                       uses)

ROW_BLOCK = 4
COLUMN_BLOCK = 32  # four AVX2 vectors
CHAINS = 8  # columns accumulated side by side when k is the contiguous axis


def columns_contiguous(a: Anchor, j: IterVar) -> bool:
    """Whether every operand read that depends on the red's column j has j in its last index."""
    for load in loads_of(a.sched, a.red):
        idx = [canon(i) for i in load.indices]
        if any(uses(i, j.var) for i in idx) and not uses(idx[-1], j.var):
            return False
    return True


def schedule_dense(outputs: Sequence[Tensor]) -> Schedule | None:
    a = anchor_stages(outputs)
    if a is None or not a.out.op.axis:
        return None
    for st in a.others:
        materialize(st)
    out, red = a.out, a.red
    *outer, j = out.op.axis
    *router, rj = red.op.axis
    i, ri = (outer.pop(), router.pop()) if outer else (None, None)
    vector = columns_contiguous(a, rj)
    jo, ji = out.split(j, block(j.dom.extent, COLUMN_BLOCK if vector else CHAINS))
    tiles = [jo]
    if i is not None:
        io, ii = out.split(i, block(i.dom.extent, ROW_BLOCK))
        out.reorder(*outer, io, jo, ii, ji)
        tiles = [io, jo]
    at = parallel_outer(out, [*outer, *tiles], data_size(red, reduce_too=True))
    out.vectorize(ji)
    red.compute_at(out, at)
    rows = [ri] if ri is not None else []
    if vector:
        red.reorder(*router, *red.op.reduce_axis, *rows, rj)
        red.vectorize(rj)
    else:
        red.reorder(*router, *rows, *red.op.reduce_axis, rj)
        red.unroll(rj)
    if ri is not None:
        red.unroll(ri)
    return a.sched

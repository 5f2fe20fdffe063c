"""Default x86 schedule of a convolution group (NC + spatial layout, any rank, groups, strides).

The padded input is computed once at the root (no bounds test per tap). The output is tiled into
blocks of output channels x output positions; each block accumulates in a small local buffer with
the reduction (input channels, kernel taps) outside the vectorized loop, then the block is stored
once through the fused epilogue (bias, batch-norm scale, residual, relu). The vector runs along
the output columns (contiguous input reads) when a row is wide enough; a tiny feature map (deep
layers, where a row would waste most lanes) is one fully unrolled block of channels x the whole
map instead, whose accumulators gcc keeps in registers.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.target import Target
from kiln.te.schedule import Schedule
from kiln.te.tensor import Tensor
from kiln.topi.schedule_anchor import anchor_stages, block, data_size, is_pad, materialize, parallel_outer, static
from kiln.topi.schedule_generic import VECTOR

CHANNEL_BLOCK = 8  # output channels per accumulator block: one AVX2 vector when channels are vectorized
COLUMN_BLOCK = 16  # output columns per accumulator block: two AVX2 vectors
UNROLLED_MAX = 128  # accumulators of a fully unrolled block (narrow maps): gcc scalarizes the buffer


def schedule_conv(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    a = anchor_stages(outputs, keep=is_pad)
    if a is None or len(a.out.op.axis) < 3:
        return None
    for st in a.others:
        materialize(st, target)
    out, red = a.out, a.red
    n, m, *rows, w = out.op.axis
    rn, rm, *rrows, rw = red.op.axis
    work = data_size(red, reduce_too=True)
    plane = 1  # channels and spatial dims are static (topi's conv requires it); only the batch is not
    for d in (*rows, w):
        plane *= static(d.dom.extent)
    if static(w.dom.extent) < VECTOR and plane <= UNROLLED_MAX:
        # a narrow map: one fully unrolled block of channels x the whole plane, in registers
        mo, mi = out.split(m, block(m.dom.extent, max(1, min(CHANNEL_BLOCK, UNROLLED_MAX // plane))))
        out.reorder(n, mo, *rows, w, mi)
        red.compute_at(out, parallel_outer(out, [n, mo], work))
        red.reorder(rn, *red.op.reduce_axis, rm, *rrows, rw)
        for iv in (rm, *rrows, rw):
            red.unroll(iv)
        return a.sched
    mo, mi = out.split(m, block(m.dom.extent, CHANNEL_BLOCK))
    wo, wi = out.split(w, block(w.dom.extent, COLUMN_BLOCK))
    out.reorder(n, mo, *rows, wo, mi, wi)
    parallel_outer(out, [n, mo, *rows], work)
    out.vectorize(wi)
    red.compute_at(out, wo)
    red.reorder(rn, *rrows, *red.op.reduce_axis, rm, rw)
    red.unroll(rm)
    red.vectorize(rw)
    return a.sched

"""x86 schedules of the Winograd transform groups (the batched GEMM between them is a grouped blocked
conv, scheduled by schedule_conv_nchwc).

Both unroll one whole tile, so the Select on the tile position is decided per statement; the channel
block is the vector. The input transform walks one channel block of a row of tiles at a time, in one
parallel loop. Inside each iteration it makes the zero-padded input rows that tile row reads (the
bounds are tested there, once per element) and, separable, their row sums d B, both on the stack
(knob winograd.rows_per_tile_row). Rows shared by two tile rows are summed twice. Made at the root
instead, each stage had a heap buffer (2 MB for a 56x56x64 input) and its own parallel partition, so
each core read rows the other had written: resnet50's and resnet18's input transforms took 13-18%
less time at 2 threads this way (0.50 -> 0.43 ms and 1.91 -> 1.61 ms in all). Where the positions
would compete for one L1 set it writes one position of the tile row at a time (_positions_alias).

The output transform writes m x m outputs of a tile through the fused epilogue (bias, residual,
relu). NOTE: a cropped last tile (output not a multiple of m) is guarded, loop partitioning then gives
the tile loops a variable extent and nothing unrolls: correct but slower. F(2x2) pays even so on odd maps
from 7x7 up; F(4x4) is kept to maps 4 divides (kiln.transform.layout.WINOGRAD_AUTO).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kiln.ir.dtype import to_numpy
from kiln.target import Target
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import ComputeOp, IterVar, Tensor
from kiln.topi.knobs import knob
from kiln.topi.schedule_anchor import data_size, inline_injective, is_pad, parallel_outer, static
from kiln.topi.schedule_transform import row_nest
from kiln.topi.winograd import KERNEL


def _winograd_stage(s: Schedule, name: str) -> Stage | None:
    found = [st for st in s.stages if isinstance(st.op, ComputeOp) and st.op.name == name]
    return found[0] if len(found) == 1 else None


def _attr(st: Stage, key: str) -> int:
    return dict(st.op.attrs)[key]


def _tile_nest(st: Stage, outer: Sequence[IterVar], tile: Sequence[IterVar], vector: IterVar) -> IterVar:
    """The outer loops fused and parallel (returned), one tile's loops unrolled, the channel block the
    vector."""
    fused = parallel_outer(st, outer, data_size(st))
    for iv in tile:
        st.unroll(iv)
    st.vectorize(vector)
    return fused


# bytes that map to one set of a typical L1 data cache (32 KB 8-way, 48 KB 12-way): addresses a multiple of it apart
# compete for that set's ways
L1_WAY_BYTES = 4096


def _positions_alias(out: Stage) -> bool:
    """Whether the transform's alpha^2 positions lie a multiple of L1_WAY_BYTES apart. Tile columns outside
    the positions write one vector to each position in turn, so then all alpha^2 lines fall in one L1 set
    (more than its ways) and are evicted half written: resnet's 7x7 maps in F(2x2) (64 blocks of 4 x 4 tiles,
    32 KB apart) ran their input transform 1.5-2.1x slower than with positions outside (each position's run
    of tiles written whole). Elsewhere tile columns stay outside: their alpha^2 statements share terms (F(4x4)'s
    1 and 2 thread runs 5-17% faster that way on resnet's 28x28 and 56x56 maps)."""
    _, _, t, u, c = (iv.dom.extent for iv in out.op.axis)
    dims = [static(d) for d in (t, u, c)]
    if None in dims:
        return False
    stride = _attr(out, "blocks") * math.prod(dims) * np.dtype(to_numpy(out.op.output(0).dtype)).itemsize
    return stride % L1_WAY_BYTES == 0


def schedule_winograd_input(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    if len(outputs) != 1:
        return None
    s = create_schedule(outputs)
    out = s[outputs[0]]
    if _winograd_stage(s, "winograd_input") is not out:
        return None
    rows = _winograd_stage(s, "winograd_rows")
    keep = (lambda st: is_pad(st) or st is rows)
    producers = [st for st in inline_injective(s, outputs, keep=keep) if st is not out and st is not rows]
    n, q, t, u, c = out.op.axis
    alpha = _attr(out, "tile") + KERNEL - 1
    qo, cb = out.split(q, _attr(out, "blocks"))
    i, j = out.split(qo, alpha)
    if knob("winograd.positions_outer", (False, True), _positions_alias(out)):
        out.reorder(n, cb, t, i, j, u, c)
    else:
        out.reorder(n, cb, t, u, i, j, c)
    row = _tile_nest(out, [n, cb, t], [i, j], c)
    local = rows is not None and knob("winograd.rows_per_tile_row", (False, True), True)
    for st in producers:
        if local and is_pad(st):  # the padded rows of one tile row, made where they are read
            st.compute_at(out, row)
            st.vectorize(st.op.axis[-1])
        else:
            st.compute_root()
            row_nest(st)
    if rows is None:
        return s
    rn, rb, ry, ru, rj, rc = rows.op.axis
    if local:
        rows.compute_at(out, row)
        rows.unroll(rj)
        rows.vectorize(rc)
    else:  # d B of every padded row at the root: each row sum computed once
        rows.compute_root()
        _tile_nest(rows, [rn, rb, ry], [rj], rc)
    return s


def schedule_winograd_output(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    if len(outputs) != 1:
        return None
    s = create_schedule(outputs)
    wino, out = _winograd_stage(s, "winograd_output"), s[outputs[0]]
    if wino is None or [iv.dom.extent for iv in out.op.axis] != [iv.dom.extent for iv in wino.op.axis]:
        return None
    cols = _winograd_stage(s, "winograd_cols")
    if [st for st in inline_injective(s, outputs, keep=lambda st: st is cols) if st is not cols] != [out]:
        return None
    m = _attr(wino, "tile")
    n, o, y, x, k = out.op.axis
    to, yi = out.split(y, m)
    uo, xi = out.split(x, m)
    out.reorder(n, o, to, uo, yi, xi, k)
    _tile_nest(out, [n, o, to], [yi, xi], k)
    if cols is not None:  # M A of every tile at the root: each column sum computed once, not once per row
        # NOTE: attached at the tile loop, bound inference cannot see through oy // m: it would compute every tile
        cols.compute_root()
        cn, co, ct, cu, cr, cx, ck = cols.op.axis
        _tile_nest(cols, [cn, co, ct], [cr, cx], ck)
    return s


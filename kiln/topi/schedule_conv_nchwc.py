"""x86 schedule of a blocked (NCHW[x]c) convolution group: a register-blocked micro-kernel.

Each tile is `oc_tile` output channel blocks x `ow_tile` output columns, one 8-float vector of
channels per (block, column): ~16 accumulators that gcc keeps in registers because the tile loops
are unrolled (a loop over them by a variable index would put them in memory) and the channel loop
is the vector. The reduction (input channel blocks, kernel rows and columns, channels inside a
block) runs outside the tile, so every step is one broadcast input value times a weight vector
(FMA). The padded input is materialized once (no bounds test per tap); the fused epilogue (bias,
folded batch norm, residual, relu/clip) runs once per element at the store. Parallel over (rows,
output channel blocks); the batch stays serial outside when it is symbolic.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.te.schedule import Schedule, Stage
from kiln.te.tensor import Tensor
from kiln.topi.knobs import knob
from kiln.topi.schedule_transform import row_nest
from kiln.topi.schedule_anchor import (Anchor, anchor_stages, block, data_size, is_pad, materialize, parallel_outer,
                                      static)

ACCUMULATORS = 16  # vector accumulators per tile: half of AVX-512VL's 32 registers (measured best on Zen 4)
OW_TILES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)
OC_TILES = (1, 2, 4, 8)
COLUMN_PREFERENCE = (7, 6, 5, 8)


def default_tiles(ow: int | None, oc_blocks: int | None = None) -> tuple[int, int]:
    """(oc_tile, ow_tile): a column tile of 5..8 that divides the row (else the row, or 7 guarded),
    then as many channel blocks as divide the channels and keep ~16 accumulators. 7 before 8: with 8
    columns of a 1x1 conv gcc turns the broadcasts into a strided vector load (half the speed)."""
    if ow is None:
        ow_tile = 7
    else:
        ow_tile = next((t for t in COLUMN_PREFERENCE if ow % t == 0), ow if ow <= 8 else 7)
    oc_tile = 1
    for t in OC_TILES:
        if t * ow_tile <= ACCUMULATORS and (oc_blocks is None or oc_blocks % t == 0):
            oc_tile = t
    return oc_tile, ow_tile


def _root_rows(st: Stage) -> None:
    """A producer (the padded input) computed once, row by row: the generic nest divides per element,
    which is slow for a 3-channel block (the stem)."""
    if len(st.op.axis) >= 3:
        st.compute_root()
        row_nest(st)
    else:
        materialize(st)


def schedule_conv_nchwc(outputs: Sequence[Tensor]) -> Schedule | None:
    a = anchor_stages(outputs, keep=is_pad)
    if a is None or len(a.out.op.axis) != 5 or len(a.red.op.reduce_axis) not in (2, 4):
        return None
    if len(a.red.op.reduce_axis) == 2:
        return _depthwise(a)
    for st in a.others:
        _root_rows(st)
    out, red = a.out, a.red
    n, m, y, x, mc = out.op.axis
    rn, rm, ry, rx, rmc = red.op.axis
    c, ky, kx, ci = red.op.reduce_axis
    oc_default, ow_default = default_tiles(static(x.dom.extent), static(m.dom.extent))
    ow_tile = knob("conv.ow_tile", OW_TILES, ow_default)
    oc_tile = knob("conv.oc_tile", OC_TILES, oc_default)
    mo, mi = out.split(m, block(m.dom.extent, oc_tile))
    xo, xi = out.split(x, block(x.dom.extent, ow_tile))
    # rows outside channel blocks: an input row stays in cache across every output block; measured
    # better on every resnet/mobilenet layer (by up to 2x on 1x1 convs), even when the weights are big
    rows_outer = knob("conv.rows_outer", (False, True), True)
    outer = [n, y, mo] if rows_outer else [n, mo, y]
    out.reorder(*outer, xo, mi, xi, mc)
    parallel_outer(out, outer, data_size(red, reduce_too=True))
    out.unroll(mi)
    out.unroll(xi)  # NOTE: a loop over the accumulators by a variable index keeps them out of registers
    out.vectorize(mc)
    red.compute_at(out, xo)
    red.reorder(rn, ry, c, ky, kx, ci, rm, rx, rmc)
    if knob("conv.unroll_taps", (False, True), (static(ci.dom.extent) or 8) < 8):  # few input channels: the stem
        red.unroll(kx)
        red.unroll(ci)
    red.unroll(rm)
    red.unroll(rx)
    red.vectorize(rmc)
    return a.sched


def _depthwise(a: Anchor) -> Schedule:
    """Depthwise: a row of `dw.ow_tile` columns x one channel vector accumulates over the taps; each
    step loads an input vector (channels are contiguous in the block) and a weight vector."""
    out, red = a.out, a.red
    inline_pad = knob("dw.inline_pad", (True, False), True)
    for st in a.others:  # NOTE: a padded copy costs more memory traffic than the conv: test bounds per tap
        if inline_pad and is_pad(st):
            st.compute_inline()
        else:
            _root_rows(st)
    n, m, y, x, mc = out.op.axis
    rn, rm, ry, rx, rmc = red.op.axis
    ky, kx = red.op.reduce_axis
    ow = static(x.dom.extent)
    default = max((t for t in OW_TILES if t <= 14 and ow is not None and ow % t == 0), default=8)  # memory bound
    xo, xi = out.split(x, block(x.dom.extent, knob("dw.ow_tile", OW_TILES, default)))
    out.reorder(n, m, y, xo, xi, mc)
    parallel_outer(out, [n, m, y], data_size(red, reduce_too=True))
    out.unroll(xi)
    out.vectorize(mc)
    red.compute_at(out, xo)
    red.reorder(rn, rm, ry, ky, kx, rx, rmc)
    if knob("dw.unroll_kx", (False, True), False):  # neighbouring columns could share input vectors across taps
        red.unroll(kx)
    red.unroll(rx)
    red.vectorize(rmc)
    return a.sched

"""x86 schedule of a blocked (NCHW[x]c) convolution group: a register-blocked micro-kernel.

Each tile is `oc_tile` output channel blocks x `ow_tile` output columns, one vector of channels per
(block, column; a block is 8 floats, or 16 on AVX-512 hosts: kiln.transform.layout.default_block):
16 to 28 accumulators that gcc keeps in registers because the tile loops
are unrolled (a loop over them by a variable index would put them in memory) and the channel loop
is the vector. The reduction (input channel blocks, kernel rows and columns, channels inside a
block) runs outside the tile, so every step is one broadcast input value times a weight vector
(FMA). The padded input is materialized once (no bounds test per tap); the fused epilogue (bias,
folded batch norm, residual, relu/clip) runs once per element at the store. Parallel over (rows,
output channel blocks), or (channel blocks, rows) for a conv that writes more than it reads, with a
grouped conv's groups outermost; the batch stays serial outside when it is symbolic. A pointwise conv
whose accumulator runs over all pixels (kiln.topi.layout._pointwise) tiles them as one row, in parallel
over channel tiles (a grouped one's groups outermost). Depthwise convs unroll every tap of a small window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kiln.ir.dtype import to_numpy
from kiln.target import Target
from kiln.te.schedule import Schedule, Stage
from kiln.te.tensor import IterVar, Tensor
from kiln.topi.knobs import knob
from kiln.topi.schedule_anchor import (
    Anchor,
    anchor_stages,
    block,
    data_size,
    is_pad,
    loads_of,
    materialize,
    parallel_axes,
    parallel_outer,
    static,
)
from kiln.topi.schedule_transform import row_nest

# vector accumulators per tile, by the host's vector registers. Of AVX-512VL's 32 (Zen 4): ~16 (measured best on
# most layers; 28 is 40% slower on resnet's 14x14 Winograd products), but up to 28 where 16 leaves little reuse:
# a row that is one tile (7x7: 4 x 7 beats 2 x 7 by ~8%), a channel count that only one block divides (3
# blocks: 3 x 7 beats 1 x 7 by ~20%), or an expansion (output bound: ~10%). The stem keeps 16.
# Of AVX2's 16 (Zen 3): a tile also holds a weight vector per block and a broadcast, so 16 and 28 spill; the
# best that fits is two blocks x 6 columns (12 + 2 + 1 registers, 8 loads per 12 FMAs). A synthetic tile,
# L1-resident, 1 thread: 2 x 6 85, 2 x 5 79, 1 x 10 75, 1 x 7 64, 2 x 7 (one weight from memory) 61-64,
# 3 x 4 53-61 (gcc takes every weight from memory), 2 x 4 46 GFLOP/s (8 accumulators: FMA latency bound).
# ResNet's rows (7 x 2^k) have no divisor 6, so the last tile of a row is guarded (loop partition peels
# it): the convs whose tiles change, alone, alternating, 1 thread, against one block x 7 columns: resnet50's
# 0.78x (every one faster), mobilenet_v2's 0.86x (one block x 10 on its 3-block projections: 0.93-1.02x). A row of
# 7 stays one tile of two blocks (14 accumulators, a weight from memory): 6 + a guarded column runs the
# 7th at a quarter of the speed, and resnet18's 3x3 convs at 7x7 1.3x slower.


@dataclass(frozen=True)
class Accumulators:
    """Vector accumulators a tile may hold: `base` by default, `wide` where the base leaves little reuse
    (see above), `stem` for a few-channel stem, `grouped` for a grouped conv's batched products (None: as
    any other conv); `choices` are the conv.accumulators knob's values. Column tiles: the first of
    `columns` that divides the row, else the row up to `row` columns, else `guarded` (the last tile of a
    row guarded); `lone` is a one-block tile's columns (a channel-block count that two blocks do not
    divide; None: _awkward_channels' tiles)."""

    base: int
    wide: int
    stem: int
    grouped: int | None
    choices: tuple[int | None, ...]
    columns: tuple[int, ...]
    row: int
    guarded: int
    lone: int | None


BUDGETS = {32: Accumulators(base=16, wide=28, stem=16, grouped=None, choices=(None, 16, 21, 24, 28),
                            columns=(7, 6, 5, 8), row=8, guarded=7, lone=None),
           16: Accumulators(base=12, wide=14, stem=14, grouped=14, choices=(None, 8, 10, 12, 14),
                            columns=(6,), row=7, guarded=6, lone=10)}


def budget(registers: int) -> Accumulators:
    """The accumulator budgets of a target with `registers` vector registers."""
    return BUDGETS[32 if registers >= 32 else 16]


# a stem's kernel row x input channels unrolled at most (7x7 x 3 is 21). Not an 8x8 patch embedding's 24: gcc
# took 20 s (CPU) on that one kernel (alias walking over 336 unrolled FMA statements), for 3% speed
STEM_UNROLLED_TAPS = 21
OW_TILES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)
OC_TILES = (1, 2, 3, 4, 5, 6, 8)
EXACT_COLUMNS = 5  # the guarded column tile of _awkward_channels
DW_COLUMN_PREFERENCE = (8, 7, 6, 5)  # 8 accumulators + 9 weight vectors (14 columns: slower on wide rows)
MAX_UNROLLED_TAPS = 25
# stride 1: a tile of T columns reads T + kw - 1 input vectors a row, so wider tiles share more: 14 or 16
# columns (+ 9 weight vectors, of 32 registers) beat 7-8 by 10-17% on 14- and 28-wide rows with 3x3 windows,
# 25-40% with 5x5 (efficientnet: 3% of the model, 1 thread); on 56-wide rows -6% to +5%, on 112 6% slower
DW_WIDE_COLUMNS = (16, 14, 12)
DW_WIDE_MAX_ROW = 32


def default_tiles(ow: int | None, oc_blocks: int | None = None, accumulators: int | None = None, *,
                  registers: int) -> tuple[int, int]:
    """(oc_tile, ow_tile): the budget's column tile (see Accumulators), then as many channel blocks as
    divide the channels and keep <= `accumulators` vectors (by default the budget's base, or its wide one
    as above). A channel count that no such tile of two or more blocks fits gets the budget's lone column
    tile, or with 32 registers _awkward_channels' tiles. With 32 registers 7 columns before 8: with 8
    columns of a 1x1 conv gcc turns the broadcasts into a strided vector load (half the speed)."""
    acc = budget(registers)
    if ow is None:
        ow_tile = acc.guarded
    else:
        ow_tile = next((t for t in acc.columns if ow % t == 0), ow if ow <= acc.row else acc.guarded)

    two_blocks = acc.base >= 2 * ow_tile  # the base budget holds two blocks of columns

    def channel_tile(limit: int) -> int:
        fits = [t for t in OC_TILES if t * ow_tile <= limit and (oc_blocks is None or oc_blocks % t == 0)]
        return max(fits, default=1)

    if accumulators is not None:
        oc_tile = channel_tile(accumulators)
    else:
        oc_tile = channel_tile(acc.wide if ow is not None and ow <= ow_tile else acc.base)
        if oc_tile == 1 and two_blocks:  # the base held two blocks, but none divides
            oc_tile = channel_tile(acc.wide)
    if oc_tile > 1 or not two_blocks or ow is None or oc_blocks is None:
        return oc_tile, ow_tile
    if acc.lone is not None:
        return 1, min(ow, acc.lone, accumulators or acc.lone)
    if oc_blocks > 1 and (accumulators is None or accumulators >= acc.wide):  # not the stem's or a grouped budget
        return _awkward_channels(ow, oc_blocks, acc.wide)
    return oc_tile, ow_tile


def _awkward_channels(ow: int, oc_blocks: int, wide: int) -> tuple[int, int]:
    """Tiles for a channel-block count with no divisor that fits beside a 5..8 column tile (1000
    classes are 125 blocks, 40 channels 5, 56 channels 7): a 1 x 7 tile loads a broadcast for every
    FMA. Measured on 1 thread against 1 x 7 (32 registers): 5 blocks x 5 columns, the last tile guarded,
    0.82-0.94x (125 blocks at 13 and 14 wide, 5 blocks at 7, 28, 29 and 56, 25 blocks at 14); without such
    a divisor, one block x a row of up to 16 (or 14 columns) 0.87-0.94x (7 and 11 blocks, 13 to 56
    wide). Not 4 columns: gcc turns a 1x1 conv's 4 broadcasts into a strided load (1.6-1.7x slower)."""
    o = max(t for t in OC_TILES if t <= 5 and oc_blocks % t == 0)
    if o > 1:
        return o, min(ow, EXACT_COLUMNS, wide // o)
    return 1, ow if ow <= 16 else next((t for t in (14, 12) if ow % t == 0), 14)


def _expands(a: Anchor) -> bool:
    """Whether the conv writes more than its data input (the first tensor its reduction reads) holds:
    mobilenet's 1x1 expansions, a stem. Its output traffic then decides the loop order."""
    data = next(iter(loads_of(a.sched, a.red)), None)
    if data is None:
        return False
    out_size, in_size = data_size(a.out), _elements(data.producer)
    return out_size is not None and in_size is not None and out_size > in_size


def _elements(t: Tensor) -> int | None:
    """Elements of a tensor (None when symbolic)."""
    dims = [static(d) for d in t.shape]
    return None if any(d is None for d in dims) else math.prod(dims)


def _weights_outer(a: Anchor, batch: int | None, rows: int | None, blocks: int | None, oc_tile: int,
                   l2: int) -> bool:
    """Whether channel blocks outside rows moves fewer bytes: rows outside stream all the weights once per
    output row unless they fit in a core's L2; channel blocks outside keep one tile's weights in cache over
    the rows, but re-read the whole input once per tile unless it fits. On a Xeon with 2 MB L2s (2 threads),
    resnet50's convs with weights far past L2 (3x3 512 -> 512 at 7x7, 1x1 2048 -> 512, the 1024 -> 2048
    projection) run 1.4-1.7x faster with weights outside; those whose input is past L2 and weights are not
    (1x1 256 -> 64 at 56x56) 1.1-1.3x slower."""
    if batch is None or rows is None or blocks is None:
        return False
    sizes: list[int] = []
    seen: list[Tensor] = []
    for load in loads_of(a.sched, a.red):
        t = load.producer
        if any(t is u for u in seen):
            continue
        seen.append(t)
        n = _elements(t)
        if n is None:
            return False
        sizes.append(n * np.dtype(to_numpy(t.dtype)).itemsize)
    if len(sizes) < 2:
        return False
    data, weights = sizes[0], sizes[1]
    tiles = -(-blocks // oc_tile)
    rows_order = (weights if weights <= l2 else batch * rows * weights) + data
    blocks_order = weights + (data if data <= l2 else tiles * data)
    return blocks_order < rows_order


def _uneven(outer: Sequence[IterVar], cores: int) -> bool:
    """Whether the cores would share a flat conv's channel tiles unevenly: its pixel tiles then join the
    parallel loop. With 32 registers an expansion's tile is 4 blocks x 7 columns, so mobilenet_v2's 144- and
    192-channel expansions have 3 channel tiles: on 2 cores one ran two, the other one (151 and 144 GFLOP/s
    against 175-230 for the other convs). Counted over the loops parallel_outer fuses (parallel_axes)."""
    extents = [static(iv.dom.extent) for iv in parallel_axes(outer)]
    return None not in extents and math.prod(extents) % cores != 0


def _unroll_channels(ky: IterVar, kx: IterVar, expands: bool, per_group: int | None) -> bool:
    """Whether gcc unrolls the loop over the channels inside an input block (`#pragma GCC unroll`, the C
    stays one step long): a pointwise conv that writes no more than it reads (not an expansion) then runs its
    long channel loop with constant offsets and no loop step per channel. resnet50's 1024 -> 256 at 14x14
    alone, 1 thread: 1.03-1.12x faster in rows, 1.10-1.34x flat; in the model (2 threads) resnet50's
    reductions and projections 1.05-1.14x, mobilenet_v2's projections 1.1-1.44x. Not elsewhere: 3x3 convs
    (their 7-column tiles hold 15 registers) ran 1.12-1.47x slower unrolled, expansions and Winograd's
    products 1.03-1.14x."""
    return static(ky.dom.extent) == 1 and static(kx.dom.extent) == 1 and not expands and not per_group


def _root_rows(st: Stage, target: Target) -> None:
    """A producer (the padded input) computed once, row by row: the generic nest divides per element,
    which is slow for a 3-channel block (the stem)."""
    if len(st.op.axis) >= 3:
        st.compute_root()
        row_nest(st)
    else:
        materialize(st, target)


def schedule_conv_nchwc(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    a = anchor_stages(outputs, keep=is_pad)
    if a is None or len(a.out.op.axis) != 5 or len(a.red.op.reduce_axis) not in (2, 4):
        return None
    if len(a.red.op.reduce_axis) == 2:
        return _depthwise(a, target)
    for st in a.others:
        _root_rows(st, target)
    out, red = a.out, a.red
    n, m, y, x, mc = out.op.axis
    rn, rm, ry, rx, rmc = red.op.axis
    c, ky, kx, ci = red.op.reduce_axis
    few_channels = (static(ci.dom.extent) or 8) < 8  # the stem
    expands = _expands(a)
    per_group = dict(red.op.attrs).get("per_group")  # a grouped conv: Winograd's batched products, ResNeXt
    budgets = budget(target.vector_registers)
    acc = budgets.stem if few_channels else budgets.wide if expands else budgets.grouped if per_group else None
    acc = knob("conv.accumulators", budgets.choices, acc)
    flat = "pixels" in dict(red.op.attrs)  # a pointwise conv whose accumulator runs over all pixels at once
    if flat:
        x = out.fuse(y, x)
    oc_default, ow_default = default_tiles(static(x.dom.extent), per_group or static(m.dom.extent), acc,
                                           registers=target.vector_registers)
    ow_tile = knob("conv.ow_tile", OW_TILES, ow_default)
    oc_tile = knob("conv.oc_tile", OC_TILES, oc_default)
    # a tile's blocks in one group share its input loads (else gcc loads each broadcast once per block: 28 loads
    # for 28 FMAs instead of 7; resnet50's Winograd products 1.14-1.27x faster on 1 thread)
    if per_group:
        g, mg = out.split(m, per_group)
        mo, mi = out.split(mg, block(mg.dom.extent, oc_tile))
        groups = [g]
    else:
        mo, mi = out.split(m, block(m.dom.extent, oc_tile))
        groups = []
    # the default column tile as chosen (a guarded 7 or 5, not block's divisor 4 of a 44- or 28-wide row:
    # gcc turns a 1x1 conv's 4 broadcasts into a strided load); a tuned one adjusted to the row
    xo, xi = out.split(x, ow_tile if ow_tile == ow_default else block(x.dom.extent, ow_tile))
    # rows outside channel blocks (3x3 convs, projections): an input row stays in cache across every
    # output block, and each thread reads only its rows. An expansion (16 -> 96 channels, the stem) is
    # bound by its output: channel blocks outside write each block's rows as one stream, 10-30% faster
    # on mobilenet's expansions (1 and 2 threads), no slower on the rest. Groups outermost, then channel
    # blocks: a thread owns whole groups and a block's weights stay in cache over the rows (resnet50's
    # Winograd products: 1.1-1.3x on 2 threads, measured under load; equal on 1).
    # A conv whose weights outgrow the cache (resnet's 7x7 stage: 9.4 MB of weights, 166 KB of input)
    # would stream every weight once per row: weights outside rows then, see _weights_outer.
    # Flat pixels (kiln.topi.layout._pointwise): channel tiles outside them, each tile's weights stay in cache
    # while it passes over the whole input, which the flat default keeps to inputs that stay in L2
    if flat:
        outer = [n, *groups, mo]
    elif knob("conv.rows_outer", (False, True), not expands and not per_group
              and not _weights_outer(a, static(n.dom.extent), static(y.dom.extent), static(m.dom.extent), oc_tile,
                                 target.l2_bytes)):
        outer = [n, *groups, y, mo]
    else:
        outer = [n, *groups, mo, y]
    out.reorder(*outer, xo, mi, xi, mc)
    pixels_too = flat and knob("conv.parallel_pixels", (False, True), _uneven(outer, target.cores))
    at = parallel_outer(out, [*outer, xo] if pixels_too else outer, data_size(red, reduce_too=True))
    out.unroll(mi)
    out.unroll(xi)  # NOTE: a loop over the accumulators by a variable index keeps them out of registers
    out.vectorize(mc)
    red.compute_at(out, at if pixels_too else xo)
    # columns outside channel blocks: each input value is broadcast into one register and used at once by the
    # tile's oc_tile FMAs, beside oc_tile weight vectors: accumulators + oc_tile + 1 registers. Blocks outside
    # would broadcast every column first (accumulators + ow_tile + 1: 36 for the 4 x 7 tile, 4 accumulators
    # spilled to the stack and updated through it every step). resnet50 0.90x, resnet18 0.92x, mobilenet_v2
    # 0.98x (2 threads, Xeon); 1x1 256 -> 1024 at 14x14 alone, 1 thread: 128 -> 149 GFLOP/s
    red.reorder(rn, ry, c, ky, kx, ci, rx, rm, rmc)
    # NOTE: a 16x16 patch embedding (ViT) unrolled as a 7x7 stem is 290 KB of C and 2 minutes of gcc
    short_rows = (static(kx.dom.extent) or STEM_UNROLLED_TAPS) * (static(ci.dom.extent) or 8) <= STEM_UNROLLED_TAPS
    if knob("conv.unroll_taps", (False, True), few_channels and short_rows):
        red.unroll(kx)
        red.unroll(ci)
    elif few_channels:
        red.unroll(ci)
    elif knob("conv.ci_unroll_hint", (False, True), _unroll_channels(ky, kx, expands, per_group)):
        red.unroll_hint(ci)
    red.unroll(rm)
    red.unroll(rx)
    red.vectorize(rmc)
    return a.sched


def _depthwise(a: Anchor, target: Target) -> Schedule:
    """Depthwise: a row of `dw.ow_tile` columns x one channel vector accumulates over the taps; each
    step loads an input vector (channels are contiguous in the block) and a weight vector."""
    out, red = a.out, a.red
    inline_pad = knob("dw.inline_pad", (True, False), True)
    for st in a.others:  # NOTE: a padded copy costs more memory traffic than the conv: test bounds per tap
        if inline_pad and is_pad(st):
            st.compute_inline()
        else:
            _root_rows(st, target)
    n, m, y, x, mc = out.op.axis
    rn, rm, ry, rx, rmc = red.op.axis
    ky, kx = red.op.reduce_axis
    ow = static(x.dom.extent)
    default = 8 if ow is None else next((t for t in DW_COLUMN_PREFERENCE if ow % t == 0), min(ow, 8))
    if ow is not None and dict(red.op.attrs).get("stride_w") == 1 and ow <= DW_WIDE_MAX_ROW:
        default = next((t for t in DW_WIDE_COLUMNS if ow % t == 0), default)
    xo, xi = out.split(x, block(x.dom.extent, knob("dw.ow_tile", OW_TILES, default)))
    # channel blocks outside rows: consecutive rows share two of their three input rows in cache
    # (rows outside, as the 1x1 convs around it do: 1.3-1.4x slower on 2 threads)
    outer = [n, y, m] if knob("dw.rows_outer", (False, True), False) else [n, m, y]
    out.reorder(*outer, xo, xi, mc)
    parallel_outer(out, outer, data_size(red, reduce_too=True))
    out.unroll(xi)
    out.vectorize(mc)
    red.compute_at(out, xo)
    red.reorder(rn, rm, ry, ky, kx, rx, rmc)
    # every tap unrolled: ~2x over a tap loop (the column tile's bounds tests fold per tap, and
    # neighbouring columns share input vectors); a large window keeps its row loop
    taps = (static(ky.dom.extent) or 0) * (static(kx.dom.extent) or 0)
    if knob("dw.unroll_ky", (False, True), 0 < taps <= MAX_UNROLLED_TAPS):
        red.unroll(ky)
    if knob("dw.unroll_kx", (False, True), static(kx.dom.extent) is not None):
        red.unroll(kx)
    red.unroll(rx)
    red.vectorize(rmc)
    return a.sched

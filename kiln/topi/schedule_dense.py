"""Default x86 schedules of matrix-product groups (mat_mul, batched mat_mul, gemm, dense_packed).

The output is tiled into (row, column) blocks; each block accumulates in a local buffer and is
stored once through the fused epilogue (bias, alpha/beta, activation, residual add). When every
operand is contiguous along the output columns (B[k, j], or B packed in column panels by
pack-dense) the block is a register tile: mr rows x a vectorized run of nr columns with k outside
it. When an operand is read across rows (B[j, k], Gemm's transB with a B that is not constant) a
column-vectorized loop would gather, so k stays contiguous and a few columns are unrolled inside it
as independent accumulation chains.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from kiln.target import Target
from kiln.te.bound import canon
from kiln.te.schedule import Schedule, Stage
from kiln.te.tensor import IterVar, Tensor
from kiln.topi.knobs import knob
from kiln.topi.schedule_anchor import (
    Anchor,
    anchor_stages,
    block,
    data_size,
    loads_of,
    materialize,
    parallel_outer,
    static,
    uses,
)

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


def schedule_dense(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    a = anchor_stages(outputs)
    if a is None or not a.out.op.axis:
        return None
    for st in a.others:
        materialize(st, target)
    out, red = a.out, a.red
    *outer, j = out.op.axis
    *router, rj = red.op.axis
    i, ri = (outer.pop(), router.pop()) if outer else (None, None)
    vector = columns_contiguous(a, rj)
    if vector and i is not None:
        return register_tiles(a, panel_width(red.op.body[0].dtype, target), 1, target)
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


# ---------------------------------------------------------------------------------------------
# register tiles: B packed in column panels (linalg.dense_packed), or read along its rows

MR = 6  # rows of the register tile: MR x nr accumulators (12 of AVX2's 16 vector registers)
MR_WIDE = 8  # with AVX-512's 32 vector registers: 16 accumulators, and 128-row products tile exactly
# with AVX-512, tiles of 6 rows x two packed panels (4 vectors, 64 floats): 24 accumulators + 4 B vectors + a
# broadcast, 10 loads per 24 FMAs against 8 x 1 panel's 10 per 16. BERT 0.91x, the MLP 0.97x (2 threads, Xeon)
WIDE_PANELS = 2
PARALLEL_MIN_MACS = 1 << 18  # below this many multiply-adds one thread finishes before a team starts
FEW_ROW_TILES = 4  # fewer row tiles than this: the batch loops are not worth a parallel loop of their own
PANEL_MAJOR_ROWS = 256  # up to this many rows (a transformer at batch 1): panels outermost ("nm"), see below
PARALLEL_MIN_BLOCKS = 8  # fewer column blocks than this: the row tiles inside each block run in parallel
L2_BLOCK = 512 * 1024  # bytes of B kept in cache while the row tiles pass over them (half a typical L2)
PANEL_MAJOR_A_BYTES = 256 * 1024  # panels outermost only while A fits in a quarter of a typical L2
# a product of at most this many rows (a batch-1 MLP or classifier: one row) tiles two panels with AVX2: one
# panel gives a row 2 accumulators, so its k loop waits on FMA latency (4 cycles a step, 16 B a cycle of weights)
# instead of streaming them. Two panels: the MLP 0.72x (1 thread), 0.84x (2 threads); at 2 and 3 rows 0.82x
# (2 threads, AMD EPYC, whole model against one panel). Not at 4 rows: a 4 x 2-panel tile is 16 accumulators
FEW_ROWS = 3
FEW_ROWS_PANELS = 2
# one row tiles four panels (8 accumulators): its k loop then has twice the FMA chains it needs to stream the
# weights, and each thread's tiles read four streams of B at once. Against two panels (kernels paired, AMD EPYC):
# the MLP's 784 -> 1024 and 1024 -> 1024 0.96-0.98x (1 and 2 threads), the classifiers 512 / 1280 / 2048 ->
# 1000 0.99x / 0.98x / 0.96x. Two rows would need 16 accumulators
ONE_ROW_PANELS = 4


def _column_blocks(out: Stage, red: Stage, jo: IterVar, io: IterVar, width: int, rows: int | None) -> list[IterVar]:
    """Tile loops [column block, row tile, panel]: the panels of one block of B (knob "dense.nc"
    panels; by default as many as fit in L2_BLOCK bytes) stay in cache while every row tile
    passes over them, instead of all of B streaming from L3 once per row tile.

    A product of few rows (at most PANEL_MAJOR_ROWS) whose L2-sized blocks would be fewer than
    PARALLEL_MIN_BLOCKS takes PARALLEL_MIN_BLOCKS smaller ones, so that one team runs over the blocks
    (each thread reads A once per block: a few hundred rows, from L3) instead of a team per block over a
    handful of row tiles, a barrier and a ragged split each. BERT's FFN-down (128 x 1536 x 384: 5 blocks
    of 5 panels -> 8 of 3), paired in the whole model, 2 threads: 0.95-0.97x median, 0.99x p10."""
    k = static(red.op.reduce_axis[0].dom.extent) if len(red.op.reduce_axis) == 1 else None
    panels = static(jo.dom.extent)
    if k is None or panels is None:
        return [io, jo]
    fit = max(1, L2_BLOCK // (k * width * 4))
    few_rows = rows is not None and rows <= PANEL_MAJOR_ROWS
    if few_rows and fit < panels and -(-panels // fit) < PARALLEL_MIN_BLOCKS <= panels:
        fit = panels // PARALLEL_MIN_BLOCKS
    nc = knob("dense.nc", (0, 1, 2, 4, 8, 16, 32), fit if fit < panels else 0)
    if not nc or nc >= panels:
        return [io, jo]
    jc, jp = out.split(jo, nc)
    return [jc, io, jp]


def default_mr(target: Target) -> int:
    return MR_WIDE if target.vector_bytes >= 64 else MR


def default_panels(target: Target, rows: int | None = None) -> int:
    """Packed panels per register tile by default: WIDE_PANELS with AVX-512; with AVX2 one, FEW_ROWS_PANELS
    for a product of at most FEW_ROWS `rows`, ONE_ROW_PANELS for a single row (see there)."""
    if target.vector_bytes >= 64:
        return WIDE_PANELS
    if rows == 1:
        return ONE_ROW_PANELS
    return FEW_ROWS_PANELS if rows is not None and rows <= FEW_ROWS else 1


def tile_rows(panels: int, target: Target) -> int:
    """Rows of a register tile `panels` packed panels wide, by default: 12-16 accumulators for one panel,
    24 for two (a knob, "dense.mr", overrides it)."""
    return default_mr(target) if panels == 1 else MR


def _panel_major(i: IterVar, red: Stage) -> bool:
    """Panels outermost when A is small: the parallel loop then splits the panels evenly in one team,
    each thread reads only its own panels of B once, and A (a few hundred short rows) stays in cache
    while every panel passes over it. Row tiles outermost (in L2-sized column blocks) suit a big A,
    which would stream from L3 once per panel (BERT's FFN-down, K = 1536: 1.34 ms panel-major vs
    0.67 ms row-major at 2 threads); with few row tiles there, the column blocks are small enough
    to share one team (see _column_blocks)."""
    m = static(i.dom.extent)
    k = static(red.op.reduce_axis[0].dom.extent) if len(red.op.reduce_axis) == 1 else None
    return m is not None and m <= PANEL_MAJOR_ROWS and k is not None and m * k * 4 <= PANEL_MAJOR_A_BYTES


def panel_width(dtype: str, target: Target) -> int:
    """Columns of a register tile when B is not packed: two of the target's vectors of `dtype`."""
    return 2 * target.vector_bytes // (8 if "64" in dtype else 4)


def schedule_dense_packed(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    """linalg.dense_packed: register tiles one panel (or "dense.panels" panels) of B wide."""
    a = anchor_stages(outputs)
    if a is None or not a.out.op.axis:
        return None
    nr = dict(a.red.op.attrs).get("panel")
    if nr is None:
        return None
    *outer, _ = a.out.op.axis
    rows = static(outer[rows_axis(outer)].dom.extent) if outer else 1
    return register_tiles(a, nr, knob("dense.panels", (1, 2, 4), default_panels(target, rows)), target)


def rows_axis(outer: Sequence[IterVar]) -> int:
    """Which leading axis of a product the register tile's rows run along: the last that is not a unit axis
    ([S, 1, K] inputs, as exporters write sequence-first attention, tile S; tiling the 1 would stream B once
    per row)."""
    return next((k for k in reversed(range(len(outer))) if static(outer[k].dom.extent) != 1), len(outer) - 1)


def register_tiles(a: Anchor, nr: int, panels: int, target: Target) -> Schedule:
    """Tile the output by mr rows x nr columns (one panel of a packed B); each tile accumulates over
    the whole k in an mr x nr local block that gcc keeps in vector registers (k outside, rows
    unrolled, the columns vectorized), then stores it once through the fused epilogue. `panels`
    (knob "dense.panels") widens a tile to several panels: more independent FMA chains when there
    are few rows (GEMV), though a batch-1 layer is bound by streaming the weights.

    The tile loops stay separate (not fused) so that loop_partition can peel the ragged last row
    block and column panel off a main part whose register tile has constant extents. The batch
    loops (fused), else the outermost tile loop (panels, or column blocks / row tiles), run in parallel
    when the product is big enough to share."""
    for st in a.others:
        materialize(st, target)
    out, red = a.out, a.red
    *outer, j = out.op.axis
    *router, rj = red.op.axis
    jo, ji = out.split(j, nr * panels)
    tiles, rows = [jo], []
    if outer:
        r = rows_axis(outer)
        i, ri = outer.pop(r), router.pop(r)
        io, ii = out.split(i, knob("dense.mr", (1, 2, 3, 4, 6, 8, 12), tile_rows(panels, target)))
        order = knob("dense.order", ("mn", "nm"), "nm" if _panel_major(i, red) else "mn")
        tiles = _column_blocks(out, red, jo, io, nr * panels, static(i.dom.extent)) if order == "mn" else [jo, io]
        out.reorder(*outer, *tiles, ii, ji)
        rows = [ri]
    macs = data_size(red, reduce_too=True)
    if macs is None or macs >= PARALLEL_MIN_MACS:
        batches = [static(b.dom.extent) for b in outer]
        if outer and None not in batches and prod(batches) >= FEW_ROW_TILES:
            out.parallel(out.fuse(*outer) if len(outer) > 1 else outer[0])
        else:  # one team for the whole product, unless a few column blocks would share badly
            few_blocks = len(tiles) == 3 and (static(tiles[0].dom.extent) or 0) < PARALLEL_MIN_BLOCKS
            out.parallel(tiles[1] if few_blocks else tiles[0])
    out.vectorize(ji)
    red.compute_at(out, tiles[-1])
    cols = [rj]
    if panels > 1:
        cols = list(red.split(rj, nr))
        red.unroll(cols[0])
    red.reorder(*router, *red.op.reduce_axis, *rows, *cols)
    red.vectorize(cols[-1])
    for r in rows:
        red.unroll(r)
    return a.sched

"""Tiles for a convolution on the matrix unit: the candidates that fit the buffers, a cost model that
predicts each one's cycles from its DMA bytes, compute cycles and bank conflicts, the pick of that
model, and the simple tiling it is measured against (one channel block in and out, as many rows as fit).

The model follows the pipeline the lowering builds: with double buffers a step costs the larger of
its loads and its compute (plus the stores sharing the DMA engine), the first load and the last
store showing; with single buffers the three add up.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.errors import KilnError
from kiln.npu import banks
from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.lower_conv import ALL_ON, Options, input_layout

ACC_ITEMSIZE = 4  # int32 or float32 accumulators


class NoTileFitsError(KilnError):
    """A layer whose smallest tile does not fit the accelerator's buffers."""


@dataclass(frozen=True)
class TileCost:
    """The cost model's prediction for one tile."""

    tile: Tile
    cycles: int
    dma_bytes: int
    compute_cycles: int
    conflicts: int


def candidates(spec: ConvSpec, config: NpuConfig, options: Options = ALL_ON, operands: int = 0) -> list[Tile]:
    """Tiles that fit the buffers: rows, output and input channels from a geometric ladder of each dim."""
    found = [Tile(r, co, co if spec.depthwise else ci) for r in _ladder(spec.out_h, 1)
             for co in _ladder(spec.cout, config.block_out)
             for ci in ([0] if spec.depthwise else _ladder(spec.cin, config.block_in))]
    fits = [t for t in found if _fits(spec, t, config, options, operands)]
    if not fits:
        raise NoTileFitsError(f"no tile of {spec} fits the accelerator's buffers ({config.to_json()})")
    return fits


def _ladder(n: int, step: int) -> list[int]:
    """step, 2*step, 4*step, ... below n, and n itself."""
    out, v = [], step
    while v < n:
        out.append(v)
        v *= 2
    return out + [n]


def _fits(spec: ConvSpec, tile: Tile, config: NpuConfig, options: Options, operands: int) -> bool:
    slots = 2 if options.double_buffer else 1
    rows = min(tile.rows, spec.out_h)
    pitch, row_pitch = input_layout(spec, tile, rows, config, options.conflict_free)
    inp = spec.in_rows(rows) * row_pitch * pitch * config.block_in * spec.itemsize
    wgt = spec.kh * spec.kw * min(tile.cin, spec.weight_cin) * min(tile.cout, spec.cout) * spec.itemsize
    acc = rows * spec.out_w * min(tile.cout, spec.cout) * ACC_ITEMSIZE
    aux = rows * spec.out_w * min(tile.cout, spec.cout) * spec.itemsize
    return (inp <= config.inp_bytes // slots and wgt <= config.wgt_bytes // slots and acc <= config.acc_bytes // slots
            and (operands == 0 or aux <= config.aux_bytes // (slots * operands)))


def predict(spec: ConvSpec, tile: Tile, config: NpuConfig, options: Options = ALL_ON,
            epilogue: tuple[EpilogueOp, ...] = ()) -> TileCost:
    """The cost model: predicted cycles of `spec` lowered with `tile` (see the module doc)."""
    ci_tiles = 1 if spec.depthwise else -(-spec.cin // tile.cin)
    row_tiles = -(-spec.out_h // tile.rows)
    co_tiles = -(-spec.cout // tile.cout)
    rows = min(tile.rows, spec.out_h)
    cout, cin = min(tile.cout, spec.cout), min(tile.cin, spec.cin)
    pitch, row_pitch = input_layout(spec, tile, rows, config, options.conflict_free)
    gemm, conflicts = _mac_cycles(spec, rows, cin, cout, pitch, row_pitch, config)
    inp_bytes = _inside_rows(spec, rows) * _inside_cols(spec) * cin * spec.itemsize
    wgt_bytes = spec.kh * spec.kw * min(cin, spec.weight_cin) * cout * spec.itemsize
    out_bytes = rows * spec.out_w * cout * spec.itemsize
    operand_bytes = sum(cout * spec.itemsize if e.per_channel else out_bytes for e in epilogue if e.tensor)
    resident = ci_tiles == 1
    load = config.dma_cycles(inp_bytes) + (0 if resident else config.dma_cycles(wgt_bytes))
    store = config.dma_cycles(out_bytes)
    vector = len(epilogue) * -(-rows * spec.out_w * cout // config.vector_lanes)
    per_tile_load = ci_tiles * load + config.dma_cycles(operand_bytes) * (operand_bytes > 0)
    per_tile_compute = ci_tiles * gemm + vector
    tiles = spec.n * co_tiles * row_tiles
    weights = spec.n * co_tiles * config.dma_cycles(wgt_bytes) if resident else 0
    if options.double_buffer:
        steady = max(per_tile_load + store, per_tile_compute)
        cycles = tiles * steady + weights + load + store
    else:
        cycles = tiles * (per_tile_load + per_tile_compute) + weights + store
    dma = tiles * (ci_tiles * (inp_bytes + (0 if resident else wgt_bytes)) + out_bytes + operand_bytes)
    dma += spec.n * co_tiles * wgt_bytes if resident else 0
    return TileCost(tile, cycles, dma, tiles * per_tile_compute, tiles * ci_tiles * conflicts)


def _mac_cycles(spec: ConvSpec, rows: int, cin: int, cout: int, pitch: int, row_pitch: int,
                config: NpuConfig) -> tuple[int, int]:
    """(cycles, conflict cycles) of one step's multiply-adds: the matrix unit's passes, or the vector unit's."""
    if spec.depthwise:
        return spec.kh * spec.kw * -(-rows * spec.out_w * cout // config.vector_lanes), 0
    passes = [banks.read_cycles(row_pitch, pitch, i, j, spec.stride, rows, spec.out_w, config.rows, config.banks)
              for i in range(spec.kh) for j in range(spec.kw)]
    blocks = -(-cin // config.block_in) * -(-cout // config.block_out)
    return sum(c for c, _ in passes) * blocks, sum(k for _, k in passes) * blocks


def _inside_rows(spec: ConvSpec, rows: int) -> int:
    """Input rows of a row tile inside the image (the padding moves no bytes)."""
    return min(spec.in_rows(rows), spec.h)


def _inside_cols(spec: ConvSpec) -> int:
    return min(spec.in_cols, spec.w)


def best_tile(spec: ConvSpec, config: NpuConfig, options: Options = ALL_ON,
              epilogue: tuple[EpilogueOp, ...] = ()) -> Tile:
    """The candidate the cost model predicts fastest (fewer DMA bytes break a tie)."""
    operands = sum(e.tensor is not None for e in epilogue)
    costs = [predict(spec, t, config, options, epilogue) for t in candidates(spec, config, options, operands)]
    return min(costs, key=lambda c: (c.cycles, c.dma_bytes)).tile


def simple_tile(spec: ConvSpec, config: NpuConfig, options: Options = ALL_ON,
                epilogue: tuple[EpilogueOp, ...] = ()) -> Tile:
    """The baseline: one block of input and output channels, as many output rows as fit."""
    operands = sum(e.tensor is not None for e in epilogue)
    cout = min(spec.cout, config.block_out)
    cin = cout if spec.depthwise else min(spec.cin, config.block_in)
    for rows in range(spec.out_h, 0, -1):
        tile = Tile(rows, cout, cin)
        if _fits(spec, tile, config, options, operands):
            return tile
    raise NoTileFitsError(f"no tile of {spec} fits the accelerator's buffers ({config.to_json()})")

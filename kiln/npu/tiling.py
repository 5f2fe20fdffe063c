"""Tiles for a convolution on the matrix unit: the candidates that fit the buffers, a cost model that
predicts each one's cycles from its DMA bytes, compute cycles and bank conflicts, the pick of that
model, and the simple tiling it is measured against (one channel block in and out, as many rows as fit).

The model itself is kiln.npu.cost_model.
"""

from __future__ import annotations

from kiln.errors import KilnError
from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.cost_model import TileCost, predict
from kiln.npu.lower_conv import ALL_ON, Options, input_layout

ACC_ITEMSIZE = 4  # int32 or float32 accumulators


class NoTileFitsError(KilnError):
    """A layer whose smallest tile does not fit the accelerator's buffers."""


def candidates(spec: ConvSpec, config: NpuConfig, options: Options = ALL_ON, operands: int = 0) -> list[Tile]:
    """Tiles that fit the buffers: rows, output and input channels from a geometric ladder of each dim (a
    packed layer's input channels in one tile: its loads gather whole column offsets)."""
    found = [Tile(r, co, co if spec.depthwise else ci) for r in _ladder(spec.out_h, 1)
             for co in _ladder(spec.cout, config.block_out)
             for ci in ([0] if spec.depthwise else [spec.cin] if spec.pack > 1 else _ladder(spec.cin, config.block_in))]
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


def best_tile(spec: ConvSpec, config: NpuConfig, options: Options = ALL_ON,
              epilogue: tuple[EpilogueOp, ...] = (), held: frozenset[str] = frozenset(),
              like: Tile | None = None) -> Tile:
    """The candidate the cost model predicts fastest (fewer DMA bytes break a tie); `held` names the
    tensors on chip (kiln.npu.cost_model.predict); with `like`, only the candidates of its input-channel
    tile (the split of each output's sum over GEMMs: with the same split a lowering's results stay bit for
    bit, the simulator forming each output row and channel block alike in any tile)."""
    return best_cost(spec, config, options, epilogue, held, like).tile


def best_cost(spec: ConvSpec, config: NpuConfig, options: Options = ALL_ON,
              epilogue: tuple[EpilogueOp, ...] = (), held: frozenset[str] = frozenset(),
              like: Tile | None = None) -> TileCost:
    """The cost model's prediction for its pick (best_tile)."""
    operands = sum(e.tensor is not None for e in epilogue)
    tiles = [t for t in candidates(spec, config, options, operands) if like is None or _alike(spec, t, like)]
    if not tiles:
        raise NoTileFitsError(f"no tile of {spec} with the input channels of {like} fits the "
                              f"accelerator's buffers ({config.to_json()})")
    costs = [predict(spec, t, config, options, epilogue, held) for t in tiles]
    return min(costs, key=lambda c: (c.cycles, c.dma_bytes))


def _alike(spec: ConvSpec, tile: Tile, like: Tile) -> bool:
    """Whether `tile` splits the input channels as `like` does."""
    return min(tile.cin, spec.cin) == min(like.cin, spec.cin)


def pick(spec: ConvSpec, config: NpuConfig, options: Options, epilogue: tuple[EpilogueOp, ...], mode: str,
         held: frozenset[str] = frozenset(), like: Tile | None = None) -> Tile:
    """The tile of tiling `mode`: "cost-model" (best_tile) or "simple" (simple_tile)."""
    if mode == "cost-model":
        return best_tile(spec, config, options, epilogue, held, like)
    return simple_tile(spec, config, options, epilogue)


def simple_tile(spec: ConvSpec, config: NpuConfig, options: Options = ALL_ON,
                epilogue: tuple[EpilogueOp, ...] = ()) -> Tile:
    """The baseline: one block of input and output channels, as many output rows as fit."""
    operands = sum(e.tensor is not None for e in epilogue)
    cout = min(spec.cout, config.block_out)
    cin = cout if spec.depthwise else spec.cin if spec.pack > 1 else min(spec.cin, config.block_in)
    for rows in range(spec.out_h, 0, -1):
        tile = Tile(rows, cout, cin)
        if _fits(spec, tile, config, options, operands):
            return tile
    raise NoTileFitsError(f"no tile of {spec} fits the accelerator's buffers ({config.to_json()})")

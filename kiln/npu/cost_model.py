"""The tiling cost model: a tile's cycles predicted from its DMA bytes, its compute cycles (bank
conflicts included) and the pipeline the lowering builds, without emitting or simulating a single
instruction.

Per step (one input-channel tile of one output tile) it takes the load unit's DMA cycles (input rows
inside the image, weights when they are not resident, the epilogue's operands at an output tile's
first step), the multiply-add unit's cycles (matrix-unit passes from the bank model, or the vector
unit's for a depthwise layer) and per output tile the epilogue's vector cycles and the store's DMA
cycles; then it runs the four-unit pipeline with the lowering's slots: a load waits for the multiply-adds
of the step `slots` back (its operands for the epilogue `slots` tiles back), a tile's first multiply-adds
for their load and for the store of the tile `slots` back, the epilogue for the tile's multiply-adds
(on their own unit after a depthwise MAC, and with the matrix unit waiting for it when epilogues do not
overlap), the store for the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.npu import banks
from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.lower_conv import ALL_ON, Options, ahead_parts, input_layout, next_weights
from kiln.npu.packing import inside_columns

TOKEN_CYCLES = 1  # a Push or a Pop


@dataclass(frozen=True)
class TileCost:
    """The cost model's prediction for one tile."""

    tile: Tile
    cycles: int
    dma_bytes: int
    compute_cycles: int
    conflicts: int


@dataclass
class _Pipeline:
    """The four units' clocks and the finish times the slots' tokens wait for."""

    slots: int
    load: int = 0
    compute: int = 0
    vector: int = 0
    store: int = 0

    def __post_init__(self) -> None:
        self.compute_done: list[int] = []
        self.vector_done: list[int] = []
        self.store_done: list[int] = []

    def step(self, load: tuple[int, int], compute: int, first_of_tile: bool, after: int = 0) -> None:
        """One step: `load` the DMA cycles before and after the wait for the epilogue freeing the operands
        (a tile's first step), `compute` its multiply-adds, `after` the load unit's cycles past its push
        (the next output-channel tile's weights loaded ahead)."""
        j = len(self.compute_done)
        self.load = max(self.load, self.compute_done[j - self.slots] if j >= self.slots else 0) + load[0]
        t = len(self.vector_done)
        if first_of_tile and load[1]:
            self.load = max(self.load, self.vector_done[t - self.slots] if t >= self.slots else 0) + load[1]
        ready = self.store_done[t - self.slots] if first_of_tile and t >= self.slots else 0
        self.compute = max(self.compute, self.load, ready) + compute
        self.compute_done.append(self.compute)
        self.load += after

    def epilogue(self, vector: int, same_unit: bool, overlap: bool) -> None:
        """A tile's epilogue: on the multiply-add unit itself (a depthwise layer's), or handed to the
        vector unit (the matrix unit waiting for it unless it overlaps)."""
        if same_unit:
            self.compute += vector
            self.vector = self.compute
        else:
            self.vector = max(self.vector, self.compute) + vector
            if not overlap:
                self.compute = self.vector + TOKEN_CYCLES
        self.compute_done[-1] = self.compute
        self.vector_done.append(self.vector)

    def store_tile(self, store: int) -> None:
        self.store = max(self.store, self.vector) + store
        self.store_done.append(self.store)


def predict(spec: ConvSpec, tile: Tile, config: NpuConfig, options: Options = ALL_ON,
            epilogue: tuple[EpilogueOp, ...] = (), held: frozenset[str] = frozenset()) -> TileCost:
    """The predicted cycles, DMA bytes, compute cycles and conflicts of `spec` lowered with `tile`; the
    tensors named in `held` ("inp", "out", an epilogue operand) are on chip (kiln.npu.onchip): moving them
    costs on-chip moves and no DMA bytes, so re-reading a held input for each output-channel tile is
    cheap and a small first weight block wins."""
    move = _Mover(spec, config, held)
    pipe = _Pipeline(2 if options.double_buffer else 1)
    ci_starts = [0] if spec.depthwise else list(range(0, spec.cin, tile.cin))
    resident = len(ci_starts) == 1
    ahead = resident and options.double_buffer and spec.out_h > tile.rows  # lower_conv._prefetch_weights
    dma = compute_total = conflicts = 0
    for n in range(spec.n):
        for co in range(0, spec.cout, tile.cout):
            cout = min(tile.cout, spec.cout - co)
            nxt = next_weights(spec, tile, (n, co)) if ahead else None
            parts = ahead_parts(spec, tile, min(tile.cout, spec.cout - nxt[1]), config) if nxt else []
            for k_oh, oh in enumerate(range(0, spec.out_h, tile.rows)):
                rows = min(tile.rows, spec.out_h - oh)
                pitch, row_pitch = input_layout(spec, tile, rows, config, options.conflict_free)
                inside = _inside_rows(spec, oh, rows) * inside_columns(spec)
                out_bytes = rows * spec.out_w * cout * spec.itemsize
                operands = [(cout * spec.itemsize if e.per_channel else out_bytes, e.tensor) for e in epilogue
                            if e.tensor]
                for k, ci in enumerate(ci_starts):
                    cin = cout if spec.depthwise else min(tile.cin, spec.cin - ci)
                    macs, lost = _mac_cycles(spec, rows, cin, cout, pitch, row_pitch, config)
                    wgt = spec.kh * spec.kw * (1 if spec.depthwise else cin) * cout * spec.itemsize
                    own = not resident or (k_oh == 0 and not (ahead and (n, co) != (0, 0)))
                    first = [move(inside * (cin // spec.pack) * spec.itemsize, "inp")] + \
                        ([move(wgt, "wgt")] if own else [])
                    then = [move(b, name) for b, name in operands] if k == 0 else []
                    later = [move(spec.kh * spec.kw * part[1] * min(tile.cout, spec.cout - nxt[1]) * spec.itemsize,
                                  "wgt") for part in parts[k_oh - 1:k_oh]] if nxt and k_oh >= 1 else []
                    pipe.step((sum(c for c, _ in first) + 2 * TOKEN_CYCLES,
                               sum(c for c, _ in then) + (TOKEN_CYCLES if then else 0)), macs + 3 * TOKEN_CYCLES,
                              k == 0, sum(c for c, _ in later))
                    dma += sum(b for _, b in first + then + later)
                    compute_total += macs
                    conflicts += lost
                vector = len(epilogue) * -(-rows * spec.out_w * cout // config.vector_lanes)
                pipe.epilogue(vector + 3 * TOKEN_CYCLES, spec.depthwise, options.overlap_epilogue)
                compute_total += vector
                stored = move(out_bytes, "out")
                pipe.store_tile(stored[0] + 2 * TOKEN_CYCLES)
                dma += stored[1]
    return TileCost(tile, max(pipe.load, pipe.compute, pipe.store), dma, compute_total, conflicts)


class _Mover:
    """A transfer's (cycles, DMA bytes): by DMA, or an on-chip move for a held tensor (as the simulator
    costs them)."""

    def __init__(self, spec: ConvSpec, config: NpuConfig, held: frozenset[str]):
        self.spec, self.config, self.held = spec, config, held

    def __call__(self, nbytes: int, name: str) -> tuple[int, int]:
        if name in self.held:
            return banks.move_cycles(nbytes, self.spec.itemsize, self.config.block_in, self.config.banks), 0
        return self.config.dma_cycles(nbytes), nbytes


def _inside_rows(spec: ConvSpec, oh: int, rows: int) -> int:
    """Input rows of the row tile starting at output row `oh` that lie inside the image (padding moves no bytes)."""
    top = oh * spec.stride - spec.pads[0]
    return max(0, min(spec.h, top + spec.in_rows(rows)) - max(0, top))


def _mac_cycles(spec: ConvSpec, rows: int, cin: int, cout: int, pitch: int, row_pitch: int,
                config: NpuConfig) -> tuple[int, int]:
    """(cycles, conflict cycles) of one step's multiply-adds: the matrix unit's passes, or the vector unit's."""
    if spec.depthwise:
        return spec.kh * spec.kw * -(-rows * spec.out_w * cout // config.vector_lanes), 0
    passes = [banks.read_cycles(row_pitch, pitch, i, j, spec.stride, rows, spec.out_w, config.rows, config.banks)
              for i in range(spec.kh) for j in spec.col_offsets]
    blocks = -(-cin // config.block_in) * -(-cout // config.block_out)
    return sum(c for c, _ in passes) * blocks, sum(k for _, k in passes) * blocks

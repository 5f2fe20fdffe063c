"""Runs a Program: functionally (every instruction computes its result on numpy tiles: int8 inputs
accumulate exactly in int32, floats in float32) and in time (each unit's cycles, the cycles it waits
on tokens, DMA bytes, bank conflicts).

The cycle model is an event loop over the three queues: the next instruction to run is the one that
can start earliest; a Pop starts when its token arrives, a Push hands its unit's time to the channel.
Instructions run functionally in that order, so a program whose tokens do not order a slot's reuse
computes wrong results here as it would on the machine.

Held tensors (kiln.npu.isa.Held) live in `onchip`, a dict the caller keeps across the programs of one
run; their loads and stores are on-chip moves, counted in `onchip_bytes` and not in `dma_bytes`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kiln.errors import KilnError
from kiln.npu import banks
from kiln.npu.config import NpuConfig
from kiln.npu.isa import (
    BUFFERS,
    CHANNELS,
    UNITS,
    Alu,
    DepthwiseMac,
    Dequantize,
    Gemm,
    Instruction,
    Load,
    Pool,
    Pop,
    Program,
    Push,
    Requantize,
    Store,
)


class NpuProgramError(KilnError):
    """An instruction stream the accelerator cannot run: a tile larger than its slot, a token never sent."""


@dataclass
class SimStats:
    """What one run of a program cost, per unit (busy and stalled cycles) and in total."""

    cycles: int = 0
    busy: dict[str, int] = field(default_factory=lambda: dict.fromkeys(UNITS, 0))
    stalls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(UNITS, 0))
    gemm_cycles: int = 0
    macs: int = 0
    dma_bytes: int = 0
    stored_bytes: int = 0  # of dma_bytes, those the store unit's DMA port wrote back
    conflicts: int = 0
    instructions: int = 0
    onchip_bytes: int = 0  # moved between buffers and held tensors instead of DRAM

    def add(self, other: SimStats) -> None:
        """Accumulate `other` as if it ran after this (kernels of one model run one after another)."""
        self.cycles += other.cycles
        for u in UNITS:
            self.busy[u] += other.busy[u]
            self.stalls[u] += other.stalls[u]
        self.gemm_cycles += other.gemm_cycles
        self.macs += other.macs
        self.dma_bytes += other.dma_bytes
        self.stored_bytes += other.stored_bytes
        self.conflicts += other.conflicts
        self.instructions += other.instructions
        self.onchip_bytes += other.onchip_bytes


class Simulator:
    """One accelerator: run(program, dram) executes `program` over the DRAM tensors in `dram` (updated in
    place by stores). With functional=False only the cycles are counted (for tile searches). `onchip` holds
    the held tensors between the programs of one run (a fresh dict when not given)."""

    def __init__(self, config: NpuConfig | None = None):
        self.config = config or NpuConfig()

    def run(self, program: Program, dram: dict[str, np.ndarray], functional: bool = True,
            onchip: dict[str, np.ndarray] | None = None) -> SimStats:
        state = _State(self.config, program, dram, functional, {} if onchip is None else onchip)
        queues = {u: deque(q) for u, q in program.queues().items()}
        tokens: dict[tuple[str, str], deque[int]] = {c: deque() for c in CHANNELS}
        clock = dict.fromkeys(UNITS, 0)
        while any(queues.values()):
            unit, start = _next(queues, tokens, clock)
            ins = queues[unit].popleft()
            if isinstance(ins, Pop):
                tokens[(ins.frm, unit)].popleft()
            state.stats.stalls[unit] += start - clock[unit]
            cost = state.execute(ins)
            state.stats.busy[unit] += cost
            clock[unit] = start + cost
            if isinstance(ins, Push):
                tokens[(unit, ins.to)].append(clock[unit])
        state.stats.cycles = max(clock.values())
        state.stats.instructions = len(program.instructions)
        return state.stats


def _next(queues: dict[str, deque], tokens: dict[tuple[str, str], deque[int]],
          clock: dict[str, int]) -> tuple[str, int]:
    """The unit whose head instruction can start first, and when; a deadlock is the program's error."""
    best: tuple[int, int, str] | None = None
    for order, unit in enumerate(UNITS):
        if not queues[unit]:
            continue
        ins = queues[unit][0]
        start = clock[unit]
        if isinstance(ins, Pop):
            waiting = tokens[(ins.frm, unit)]
            if not waiting:
                continue
            start = max(start, waiting[0])
        if best is None or (start, order) < best[:2]:
            best = (start, order, unit)
    if best is None:
        heads = {u: q[0] for u, q in queues.items() if q}
        raise NpuProgramError(f"deadlock: every unit waits for a token that is never sent; queue heads: {heads}")
    return best[2], best[0]


class _State:
    """The on-chip buffers of one run and the cost of each instruction."""

    def __init__(self, config: NpuConfig, program: Program, dram: dict[str, np.ndarray], functional: bool,
                 onchip: dict[str, np.ndarray]):
        self.config, self.program, self.dram, self.functional = config, program, dram, functional
        self.onchip = onchip
        self.held = {h.tensor: h for h in program.held}
        for buf in BUFFERS:
            if program.held_bytes(buf) > getattr(config, f"{buf}_bytes"):
                raise NpuProgramError(f"{program.name}: held tensors need {program.held_bytes(buf)} bytes of buffer "
                                      f"{buf!r}, which holds {getattr(config, f'{buf}_bytes')}")
        self.tiles: dict[tuple[str, int], np.ndarray] = {}
        self.shapes: dict[tuple[str, int], tuple[int, ...]] = {}  # kept in timing-only runs too
        self.layouts: dict[int, tuple[int, int]] = {}
        self.stats = SimStats()
        self.itemsize = program.dtype.itemsize
        self.acc_dtype = np.dtype(np.int32) if program.dtype.kind == "i" else np.dtype(np.float32)

    def execute(self, ins: Instruction) -> int:
        if isinstance(ins, Load):
            return self._load(ins)
        if isinstance(ins, Gemm):
            return self._gemm(ins)
        if isinstance(ins, DepthwiseMac):
            return self._depthwise(ins)
        if isinstance(ins, Alu):
            return self._alu(ins)
        if isinstance(ins, Dequantize):
            return self._dequantize(ins)
        if isinstance(ins, Requantize):
            return self._requantize(ins)
        if isinstance(ins, Pool):
            return self._pool(ins)
        if isinstance(ins, Store):
            return self._store(ins)
        return 1  # Push / Pop: one cycle to pass the token

    def _slot_bytes(self, buf: str) -> int:
        free = getattr(self.config, f"{buf}_bytes") - self.program.held_bytes(buf)
        return free // self.program.slots.get(buf, 1)

    def _held(self, name: str, reading: bool) -> np.ndarray:
        """A held tensor's on-chip storage; a functional run may read only one an earlier store wrote."""
        if name not in self.onchip:
            if reading and self.functional:
                raise NpuProgramError(f"{self.program.name}: reads held tensor {name!r} before any program "
                                      "stored it")
            self.onchip[name] = np.zeros(self.held[name].shape, self.held[name].dtype)
        return self.onchip[name]

    def _transfer(self, name: str, nbytes: int, itemsize: int) -> int:
        """The cycles of moving `nbytes` of tensor `name`: on chip when it is held, else by DMA."""
        if name in self.held:
            self.stats.onchip_bytes += nbytes
            return banks.move_cycles(nbytes, itemsize, self.config.block_in, self.config.banks)
        self.stats.dma_bytes += nbytes
        return self.config.dma_cycles(nbytes)

    def _check_fits(self, buf: str, nbytes: int, what: str) -> None:
        if nbytes > self._slot_bytes(buf):
            raise NpuProgramError(f"{self.program.name}: {what} needs {nbytes} bytes of buffer {buf!r}, a slot "
                                  f"holds {self._slot_bytes(buf)} ({self.program.slots.get(buf, 1)} slot(s))")

    def _load(self, ins: Load) -> int:
        if ins.into:
            return self._load_ahead(ins)
        src = self._held(ins.tensor, True) if ins.tensor in self.held else self.dram[ins.tensor]
        nbytes = _inside(src.shape, ins) * src.dtype.itemsize
        words = -(-ins.size[3] // self.config.block_in)
        pitch, row_pitch = ins.pitch or words, ins.row_pitch or ins.size[2]
        held = ins.size[1] * row_pitch * pitch * self.config.block_in * src.dtype.itemsize
        size = ins.whole or ins.size
        self._check_fits(ins.buf, held if ins.buf == "inp" else int(np.prod(size)) * src.dtype.itemsize,
                         f"a tile of {ins.tensor}")
        if ins.buf == "inp":
            self.layouts[ins.slot] = (pitch, row_pitch)
        self.shapes[(ins.buf, ins.slot)] = size if ins.buf == "wgt" else size[1:]
        if ins.whole:
            self._load_part(ins, src)
        elif self.functional:
            tile = _packed_region(src, ins) if ins.pack > 1 else _region(src, ins.start, ins.size, ins.fill)
            self.tiles[(ins.buf, ins.slot)] = tile if ins.buf == "wgt" else tile[0]
        return self._transfer(ins.tensor, nbytes, src.dtype.itemsize)

    def _load_part(self, ins: Load, src: np.ndarray) -> None:
        """Part `at` of a weight tile loaded in parts: the part at offset 0 starts the tile, a later one
        needs that tile in the slot."""
        key = (ins.buf, ins.slot)
        fits = ins.buf == "wgt" and all(a + n <= d for a, n, d in zip(ins.at, ins.size, ins.whole))
        if not fits or (any(ins.at) and self.functional and self.tiles.get(key, np.empty(0)).shape != ins.whole):
            raise NpuProgramError(f"{self.program.name}: a part {ins.size} at {ins.at} of a {ins.buf} tile of "
                                  f"{ins.whole} needs a weight tile of that size started in slot {ins.slot}")
        if self.functional:
            if not any(ins.at):
                self.tiles[key] = np.zeros(ins.whole, src.dtype)
            self.tiles[key][tuple(slice(a, a + n) for a, n in zip(ins.at, ins.size))] = \
                _region(src, ins.start, ins.size, ins.fill)

    def _load_ahead(self, ins: Load) -> int:
        """A DMA into part of a held region (the next program's first weights) instead of a slot."""
        if ins.into not in self.held or any(a + n > d for a, n, d in zip(ins.at, ins.size, self.held[ins.into].shape)):
            raise NpuProgramError(f"{self.program.name}: a load of {ins.size} at {ins.at} into {ins.into!r} needs a "
                                  "held region that holds it")
        src = self.dram[ins.tensor]
        if self.functional:
            part = tuple(slice(a, a + n) for a, n in zip(ins.at, ins.size))
            self._held(ins.into, False)[part] = _region(src, ins.start, ins.size, ins.fill)
        return self._transfer(ins.tensor, _inside(src.shape, ins) * src.dtype.itemsize, src.dtype.itemsize)

    def _gemm(self, ins: Gemm) -> int:
        c = self.config
        cin, cout = self.shapes[("wgt", ins.wgt_slot)][2:]
        self.shapes[("acc", ins.acc_slot)] = (ins.out_h, ins.out_w, cout)
        if self.functional:
            inp = self.tiles[("inp", ins.inp_slot)]
            wgt = self.tiles[("wgt", ins.wgt_slot)][ins.kh, ins.kw]
            col = ins.kw * ins.col_step
            window = inp[ins.kh:ins.kh + ins.stride * (ins.out_h - 1) + 1:ins.stride,
                         col:col + ins.stride * (ins.out_w - 1) + 1:ins.stride]
            product = _blocks_product(np.ascontiguousarray(window, dtype=self.acc_dtype), wgt.astype(self.acc_dtype),
                                      c.block_out)
            key = ("acc", ins.acc_slot)
            self.tiles[key] = product if ins.reset else self.tiles[key] + product
        self._check_fits("acc", ins.out_h * ins.out_w * cout * self.acc_dtype.itemsize, "an accumulator tile")
        pitch, row_pitch = self.layouts[ins.inp_slot]
        cycles, conflicts = banks.read_cycles(row_pitch, pitch, ins.kh, ins.kw * ins.col_step, ins.stride, ins.out_h,
                                              ins.out_w, c.rows, c.banks)
        blocks = -(-cin // c.block_in) * -(-cout // c.block_out)
        self.stats.conflicts += conflicts * blocks
        self.stats.gemm_cycles += cycles * blocks
        self.stats.macs += ins.out_h * ins.out_w * cin * cout
        return cycles * blocks

    def _depthwise(self, ins: DepthwiseMac) -> int:
        channels = self.shapes[("wgt", ins.wgt_slot)][3]
        self.shapes[("acc", ins.acc_slot)] = (ins.out_h, ins.out_w, channels)
        self._check_fits("acc", ins.out_h * ins.out_w * channels * self.acc_dtype.itemsize, "an accumulator tile")
        if self.functional:
            inp = self.tiles[("inp", ins.inp_slot)]
            window = inp[ins.kh:ins.kh + ins.stride * (ins.out_h - 1) + 1:ins.stride,
                         ins.kw:ins.kw + ins.stride * (ins.out_w - 1) + 1:ins.stride]
            product = window.astype(self.acc_dtype) * self.tiles[("wgt", ins.wgt_slot)][ins.kh, ins.kw, 0].astype(
                self.acc_dtype)
            key = ("acc", ins.acc_slot)
            self.tiles[key] = product if ins.reset else self.tiles[key] + product
        self.stats.macs += ins.out_h * ins.out_w * channels
        return self._vector_cycles(ins.out_h * ins.out_w * channels)

    def _alu(self, ins: Alu) -> int:
        key = ("acc", ins.acc_slot)
        if self.functional:
            acc = self.tiles[key]
            operand = self.tiles[("aux", ins.aux_slot)] if ins.aux_slot is not None else ins.imm
            self.tiles[key] = _alu_op(ins.op, acc, operand, self.acc_dtype)
        return self._vector_cycles(int(np.prod(self.shapes[key])))

    def _dequantize(self, ins: Dequantize) -> int:
        key = (ins.buf, ins.slot)
        if self.functional:
            values = self.tiles[key].astype(np.int32) - np.int32(ins.zero_point)
            self.tiles[key] = values.astype(np.float32) * np.float32(ins.scale)
        return self._vector_cycles(int(np.prod(self.shapes[key])))

    def _requantize(self, ins: Requantize) -> int:
        key = ("acc", ins.acc_slot)
        if self.functional:
            scaled = np.rint(self.tiles[key].astype(np.float32) / np.float32(ins.scale)).astype(np.int32)
            self.tiles[key] = np.clip(scaled + np.int32(ins.zero_point), ins.lo, ins.hi).astype(np.int32)
        return self._vector_cycles(int(np.prod(self.shapes[key])))

    def _pool(self, ins: Pool) -> int:
        channels = self.shapes[("aux", ins.aux_slot)][-1]
        self.shapes[("acc", ins.acc_slot)] = (ins.out_h, ins.out_w, channels)
        self._check_fits("acc", ins.out_h * ins.out_w * channels * self.acc_dtype.itemsize, "a pooled tile")
        if self.functional:
            src = self.tiles[("aux", ins.aux_slot)].astype(self.acc_dtype)
            windows = [src[i:i + ins.stride * (ins.out_h - 1) + 1:ins.stride,
                           j:j + ins.stride * (ins.out_w - 1) + 1:ins.stride]
                       for i in range(ins.kh) for j in range(ins.kw)]
            reduced = np.maximum.reduce(windows) if ins.op == "max" else np.add.reduce(windows) / len(windows)
            self.tiles[("acc", ins.acc_slot)] = reduced.astype(self.acc_dtype)
        return ins.kh * ins.kw * self._vector_cycles(ins.out_h * ins.out_w * channels)

    def _vector_cycles(self, elements: int) -> int:
        return max(1, -(-elements // self.config.vector_lanes))

    def _store(self, ins: Store) -> int:
        dst = self._held(ins.tensor, False) if ins.tensor in self.held else self.dram[ins.tensor]
        if self.functional:
            tile = self.tiles[("acc", ins.acc_slot)][:ins.size[1], :ins.size[2], :ins.size[3]]
            region = tuple(slice(s, s + n) for s, n in zip(ins.start, ins.size))
            dst[region] = _cast(tile, dst.dtype)
        nbytes = int(np.prod(ins.size)) * dst.dtype.itemsize
        if ins.tensor not in self.held:
            self.stats.stored_bytes += nbytes
        return self._transfer(ins.tensor, nbytes, dst.dtype.itemsize)


def _blocks_product(window: np.ndarray, w: np.ndarray, block_out: int) -> np.ndarray:
    """window (rows, cols, K) @ w (K, N) as the matrix unit forms it: a row of output pixels by a block of
    `block_out` output channels at a time. A float product then does not depend on how many rows or output
    channels a tile holds (one matmul over all of them may order its sums by their count); integer sums
    are exact in any order, one matmul."""
    if window.dtype.kind != "f":
        return (window.reshape(-1, window.shape[-1]) @ w).reshape(*window.shape[:2], -1)
    return np.concatenate([np.matmul(window, np.ascontiguousarray(w[:, j:j + block_out]))
                           for j in range(0, w.shape[1], block_out)], axis=2)


def _region(src: np.ndarray, start: tuple[int, ...], size: tuple[int, ...], fill: float) -> np.ndarray:
    """`src`'s region at `start` of `size`; what lies outside `src` reads as `fill`."""
    lo = [max(0, s) for s in start]
    hi = [min(d, s + n) for d, s, n in zip(src.shape, start, size)]
    tile = np.full(size, _fill(fill, src.dtype), dtype=src.dtype)
    if all(h > low for low, h in zip(lo, hi)):
        tile[tuple(slice(low - s, h - s) for low, h, s in zip(lo, hi, start))] = src[
            tuple(slice(low, h) for low, h in zip(lo, hi))]
    return tile


def _packed_region(src: np.ndarray, ins: Load) -> np.ndarray:
    """A load gathering `ins.pack` column offsets into channels (see Load)."""
    n, h, w, c = ins.start
    cols = ins.size[2]
    wide = _region(src, (n, h, w, 0), (1, ins.size[1], cols + ins.pack - 1, src.shape[3]), ins.fill)
    packed = np.concatenate([wide[:, :, j:j + cols] for j in range(ins.pack)], axis=3)
    return packed[..., c:c + ins.size[3]]


def _inside(shape: tuple[int, ...], ins: Load) -> int:
    """Elements of `ins`'s region inside a tensor of `shape`: what its DMA moves (each packed column
    offset's, counted over the packed channels it keeps)."""
    def count(start: tuple[int, ...], size: tuple[int, ...]) -> int:
        return int(np.prod([max(0, min(d, s + k) - max(0, s)) for d, s, k in zip(shape, start, size)]))
    if ins.pack == 1:
        return count(ins.start, ins.size)
    n, h, w, c = ins.start
    per_offset = [len(range(max(c, j * shape[3]), min(c + ins.size[3], (j + 1) * shape[3])))
                  for j in range(ins.pack)]
    return sum(count((n, h, w + j, 0), (1, ins.size[1], ins.size[2], k)) for j, k in enumerate(per_offset) if k)


def _alu_op(op: str, acc: np.ndarray, operand: np.ndarray | float | int | None, dtype: np.dtype) -> np.ndarray:
    """One vector-unit operation in the accumulator's type (int32 wraps as the hardware's would); `fmul` turns
    an int32 tile into float32."""
    if op == "fmul":
        return acc.astype(np.float32) * np.asarray(operand).astype(np.float32)
    dtype = acc.dtype if acc.dtype.kind == "f" else dtype
    b = np.asarray(operand).astype(dtype)
    if op == "add":
        return (acc + b).astype(dtype)
    if op == "mul":
        return (acc * b).astype(dtype)
    if op == "max":
        return np.maximum(acc, b)
    if op == "min":
        return np.minimum(acc, b)
    if op == "shr":
        return ((acc + (np.int32(1) << (b - 1))) >> b).astype(dtype) if np.all(b > 0) else acc
    raise NpuProgramError(f"unknown vector-unit operation {op!r}")


def _cast(tile: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """An accumulator tile in a DRAM tensor's type: integers saturate (after the program's requantization)."""
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        return np.clip(tile, info.min, info.max).astype(dtype)
    return tile.astype(dtype)


def _fill(value: float, dtype: np.dtype) -> float | int:
    """A load's fill in the tensor's type: integers saturate (a max pool's -inf padding is int8's -128)."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(np.clip(value, info.min, info.max))
    return value

"""Graph scheduling for on-chip memory: which intermediates of consecutive accelerator kernels stay on
chip instead of going to DRAM and coming back.

A tensor qualifies when an accelerator kernel produces it and only accelerator kernels read it (as
their input, or as a residual operand of their epilogue), none of them a CPU step or the model's
result, and every step from the producer to the last reader runs on the accelerator (a group: conv ->
conv, conv -> depthwise -> conv, conv -> pool, a residual's source held until the add that reads it).
A qualifying tensor is held whole (kiln.npu.isa.Held): the producer's stores of it and the readers'
loads of it become on-chip moves between its region and their slots, with no DMA.

Why whole tensors and not layer fusion over row tiles with halos: every kernel keeps exactly the tiles,
instructions and token order of its own lowering (only the source or destination of some loads and
stores changes), so the outputs are bit-identical to the unfused lowering's, and the slot reuse each
program orders with its tokens is untouched. Kernels of one run execute one after another, so a held
tensor is complete before its first reader starts; no token between programs is needed. Row-tile
fusion would hold only a band of rows (larger layers would qualify) but it re-tiles the producer by the
consumer's halo, recomputing the halo rows or keeping a line buffer; not built here.

Capacity: a held tensor takes a region of one buffer in every program from its producer to its last
reader, and each of those programs' slots (its largest tile of that buffer, times its slots: the
double buffers included, `buffer_needs`) must still fit beside the held tensors. Candidates are taken
in the order of what the cost model says they save (the DMA cycles of the stores and loads they
replace, less the on-chip moves), each into the buffer with the most room over its span; one that fits
nowhere stays in DRAM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kiln.ir.expr import Expr, Function, Tuple
from kiln.npu import banks
from kiln.npu.config import NpuConfig
from kiln.npu.isa import BUFFERS, DepthwiseMac, Gemm, Held, Instruction, Load, Pool, Program, Store
from kiln.npu.kernel import NpuKernel
from kiln.npu.placement import Step

ACC_ITEMSIZE = 4  # int32 or float32 accumulators; the upper bound of an operand tile's items too


@dataclass(frozen=True)
class Candidate:
    """A tensor that may stay on chip: produced by kernel `producer`, read by kernels `readers` (through
    their operand names `names[reader]`)."""

    producer: int
    readers: tuple[int, ...]
    names: dict[int, tuple[str, ...]]
    shape: tuple[int, int, int, int]
    dtype: str

    @property
    def span(self) -> range:
        return range(self.producer, max(self.readers) + 1)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Plan:
    """The tensors chosen to stay on chip: per kernel index the held tensors its program carries, and each
    chosen candidate with its region."""

    held: dict[int, list[Held]]
    chosen: list[tuple[Candidate, Held]]

    def names(self, index: int) -> frozenset[str]:
        """The names kernel `index` uses for the held tensors it reads or stores ("out" for its output)."""
        read = {n for c, _ in self.chosen for n in c.names.get(index, ())}
        return frozenset(read | ({"out"} if any(c.producer == index for c, _ in self.chosen) else set()))

    def room(self, index: int, config: NpuConfig) -> NpuConfig:
        """`config` with kernel `index`'s buffers less what the held tensors over it take: its slots' share."""
        return dataclasses.replace(config, **{f"{b}_bytes": getattr(config, f"{b}_bytes") -
                                              sum(h.nbytes for h in self.held[index] if h.buf == b)
                                              for b in BUFFERS})


def schedule(fn: Function, steps: Sequence[Step], kernels: Sequence[NpuKernel | None],
             config: NpuConfig) -> list[NpuKernel | None]:
    """`kernels` (one per step of `fn`, None for a CPU step) with the intermediates that fit held on chip."""
    return apply(kernels, plan(fn, steps, kernels, config))


def plan(fn: Function, steps: Sequence[Step], kernels: Sequence[NpuKernel | None], config: NpuConfig) -> Plan:
    """Which intermediates of `kernels` stay on chip, and where (see the module doc)."""
    needs = {i: buffer_needs(k.program, config) for i, k in enumerate(kernels) if k is not None}
    held: dict[int, list[Held]] = {i: [] for i in needs}
    chosen: list[tuple[Candidate, Held]] = []
    found = candidates(fn, steps, kernels)
    for cand in sorted(found, key=lambda c: (-saving(c, kernels, config), c.producer)):
        buf = _roomiest(cand, needs, held, config)
        if buf is None:
            continue
        h = Held(f"held.{kernels[cand.producer].name}", buf, cand.shape, cand.dtype)
        for i in cand.span:
            held[i].append(h)
        chosen.append((cand, h))
    return Plan(held, chosen)


def apply(kernels: Sequence[NpuKernel | None], plan: Plan) -> list[NpuKernel | None]:
    """`kernels` with `plan`'s held tensors: outputs stored on chip, reads of them moved from chip."""
    return [None if k is None else _with_held(k, i, plan.held[i], plan.chosen) for i, k in enumerate(kernels)]


def fits_beside(program: Program, index: int, plan: Plan, config: NpuConfig) -> bool:
    """Whether `program`'s slots fit kernel `index`'s buffers beside the held tensors `plan` puts there."""
    needs = buffer_needs(program, config)
    return all(needs[b] + sum(h.nbytes for h in plan.held[index] if h.buf == b) <= getattr(config, f"{b}_bytes")
               for b in BUFFERS)


def candidates(fn: Function, steps: Sequence[Step], kernels: Sequence[NpuKernel | None]) -> list[Candidate]:
    """The accelerator kernels' outputs that may stay on chip (see the module doc)."""
    outside = {id(e) for e in _flat(fn.body)}
    for step, kernel in zip(steps, kernels):
        if kernel is None:
            outside.update(id(e) for a in step.anchor.args for e in _flat(a))
    out = []
    for i, (step, kernel) in enumerate(zip(steps, kernels)):
        if kernel is None or id(step.result) in outside:
            continue
        names = {j: tuple(n for n, e in k.operands.items() if e is step.result)
                 for j, k in enumerate(kernels) if k is not None}
        readers = tuple(j for j, n in names.items() if n)
        if not readers or any(kernels[j] is None for j in range(i, max(readers) + 1)):
            continue
        out.append(Candidate(i, readers, {j: names[j] for j in readers}, kernel.out_shape, kernel.spec.dtype))
    return out


def _flat(e: object) -> list[Expr]:
    """`e` and, through tuples, every expression it is made of."""
    if isinstance(e, Tuple):
        return [e, *(x for f in e.fields for x in _flat(f))]
    return [e] if isinstance(e, Expr) else []


def saving(cand: Candidate, kernels: Sequence[NpuKernel | None], config: NpuConfig) -> int:
    """The cost model of holding `cand`: the DMA cycles of the transfers it replaces, less the on-chip
    moves replacing them."""
    itemsize = np.dtype(cand.dtype).itemsize
    moved = [_moved(ins, cand.shape, itemsize) for ins in kernels[cand.producer].program.instructions
             if isinstance(ins, Store) and ins.tensor == "out"]
    for j in cand.readers:
        moved += [_moved(ins, cand.shape, itemsize) for ins in kernels[j].program.instructions
                  if isinstance(ins, Load) and ins.tensor in cand.names[j]]
    return sum(config.dma_cycles(b) - banks.move_cycles(b, itemsize, config.block_in, config.banks) for b in moved)


def _moved(ins: Load | Store, shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes a load or store of a tensor of `shape` moves (the parts of a region outside it move none)."""
    inside = [max(0, min(d, s + n) - max(0, s)) for d, s, n in zip(shape, ins.start, ins.size)]
    return int(np.prod(inside)) * itemsize


def buffer_needs(program: Program, config: NpuConfig) -> dict[str, int]:
    """Bytes each buffer's slots need: its largest tile in `program`, times its slots (the sizes the
    simulator checks each tile against)."""
    itemsize = program.dtype.itemsize
    largest = dict.fromkeys(BUFFERS, 0)
    channels: dict[tuple[str, int], int] = {}
    for ins in program.instructions:
        buf, nbytes = _tile_bytes(ins, channels, itemsize, config)
        if buf:
            largest[buf] = max(largest[buf], nbytes)
    return {b: largest[b] * program.slots.get(b, 1) for b in BUFFERS}


def _tile_bytes(ins: Instruction, channels: dict[tuple[str, int], int], itemsize: int,
                config: NpuConfig) -> tuple[str | None, int]:
    """(buffer, bytes) of the tile `ins` puts on chip; (None, 0) for an instruction that puts none."""
    if isinstance(ins, Load) and ins.into:
        return None, 0  # into a held region, not a slot
    if isinstance(ins, Load):
        channels[(ins.buf, ins.slot)] = ins.size[3]
        if ins.buf == "inp":
            words = -(-ins.size[3] // config.block_in)
            pitch, row_pitch = ins.pitch or words, ins.row_pitch or ins.size[2]
            return "inp", ins.size[1] * row_pitch * pitch * config.block_in * itemsize
        return ins.buf, int(np.prod(ins.whole or ins.size)) * (itemsize if ins.buf == "wgt" else ACC_ITEMSIZE)
    if isinstance(ins, (Gemm, DepthwiseMac)):
        return "acc", ins.out_h * ins.out_w * channels[("wgt", ins.wgt_slot)] * ACC_ITEMSIZE
    if isinstance(ins, Pool):
        return "acc", ins.out_h * ins.out_w * channels[("aux", ins.aux_slot)] * ACC_ITEMSIZE
    return None, 0


def _roomiest(cand: Candidate, needs: dict[int, dict[str, int]], held: dict[int, list[Held]],
              config: NpuConfig) -> str | None:
    """The buffer with the most room left over `cand`'s span, if `cand` fits in it."""
    room = {b: min(getattr(config, f"{b}_bytes") - needs[i][b] - sum(h.nbytes for h in held[i] if h.buf == b)
                   for i in cand.span) for b in BUFFERS}
    best = max(BUFFERS, key=lambda b: room[b])
    return best if room[best] >= cand.nbytes else None


def _with_held(kernel: NpuKernel, index: int, held: list[Held],
               chosen: list[tuple[Candidate, Held]]) -> NpuKernel:
    """`kernel` with the held tensors of its place in the run: its output stored on chip when it is held,
    its reads of held tensors moved from chip."""
    if not held:
        return kernel
    renamed = {n: h.tensor for c, h in chosen for n in c.names.get(index, ())}
    output = next((h.tensor for c, h in chosen if c.producer == index), None)
    if output:
        renamed["out"] = output
    program = dataclasses.replace(kernel.program, held=tuple(held),
                                  instructions=[_renamed(ins, renamed) for ins in kernel.program.instructions])
    operands = {n: e for n, e in kernel.operands.items() if n not in renamed}
    return dataclasses.replace(kernel, program=program, operands=operands, held_output=output)


def _renamed(ins: Instruction, renamed: dict[str, str]) -> Instruction:
    if isinstance(ins, (Load, Store)) and ins.tensor in renamed:
        return dataclasses.replace(ins, tensor=renamed[ins.tensor])
    return ins

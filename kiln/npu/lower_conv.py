"""Tensorize-style lowering of a convolution (or dense layer) onto the matrix unit: the loop nest over
images, output-channel tiles, output-row tiles and input-channel tiles becomes DMA loads, one GEMM per
kernel offset, the vector-unit epilogue and a store per output tile, with the dependence tokens that
let the load of step j+1 overlap the compute of step j when the buffers are double (two slots). A
depthwise convolution takes the same loop nest with one channel tile in and out, its multiply-adds on
the vector unit.

Weights stay resident across the row tiles of an output-channel tile when one input-channel tile
covers all of cin. Slot reuse is ordered by tokens: a load into a slot pops the token of the unit that
ran the step that last read it (the matrix unit for a GEMM, the vector unit for a depthwise MAC), and
an accumulator slot is reset only after the store unit's token says its tile left. A convolution's
epilogue runs on the vector unit's own queue: the matrix unit hands it each finished tile
(compute->vector), the vector unit hands it to the store (vector->store), and operand tiles in the aux
buffer are reloaded only after the vector unit's token (vector->load) says the epilogue that read them
is done. With `Options.overlap_epilogue` off the matrix unit also waits for each epilogue
(vector->compute), as on a machine whose GEMM and ALU share one compute queue (VTA's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kiln.npu import banks, parts
from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.isa import Alu, DepthwiseMac, Gemm, Instruction, Load, Pop, Program, Push, Store


@dataclass(frozen=True)
class Options:
    """The optimizations a lowering applies (each can be turned off to measure it)."""

    double_buffer: bool = True
    conflict_free: bool = True
    onchip: bool = True  # intermediates held on chip between kernels when they fit (kiln.npu.onchip)
    pack_columns: bool = True  # few input channels: kernel columns packed into channels (kiln.npu.packing)
    overlap_epilogue: bool = True  # a tile's epilogue (vector unit) overlaps the next tile's GEMMs
    prefetch_weights: bool = True  # a kernel's first weights loaded during the kernel before (kiln.npu.prefetch)


ALL_ON = Options()


def input_layout(spec: ConvSpec, tile: Tile, rows: int, config: NpuConfig, conflict_free: bool) -> tuple[int, int]:
    """(pitch, row_pitch) of the input tile of `rows` output rows: dense, or the conflict-free layout."""
    words = -(-min(tile.cin, spec.cin) // config.block_in)
    if not conflict_free:
        return words, spec.in_cols
    return banks.conflict_free_layout(spec.in_cols, words, (spec.kh, spec.kw_span), spec.stride, rows, spec.out_w,
                                      config.rows, config.banks)


def lower_conv(name: str, spec: ConvSpec, tile: Tile, tensors: tuple[str, str, str],
               epilogue: Sequence[EpilogueOp], config: NpuConfig, options: Options = ALL_ON) -> Program:
    """The program computing DRAM `tensors` = (input, weights, output) of `spec` with `epilogue` applied."""
    slots = 2 if options.double_buffer else 1
    aux_per_tile = sum(e.tensor is not None for e in epilogue)
    out: list[Instruction] = []
    queues = _Queues(out, slots)
    for n in range(spec.n):
        for co in range(0, spec.cout, tile.cout):
            for oh in range(0, spec.out_h, tile.rows):
                _output_tile(queues, spec, tile, tensors, epilogue, config, options, (n, oh, co), aux_per_tile)
    return Program(name, out, {"inp": slots, "wgt": slots, "acc": slots, "aux": slots * max(1, aux_per_tile)},
                   np.dtype(spec.dtype))


class _Queues:
    """Step and tile counters of one program, for slot numbers and token pops."""

    def __init__(self, out: list[Instruction], slots: int):
        self.out, self.slots = out, slots
        self.step = 0
        self.tile = 0
        self.wgt_slot = 0
        self.weight_tiles = 0  # resident weight tiles loaded so far: they alternate slots by this count
        self.weights_for: tuple[int, int] | None = None
        self.prefetched: tuple[int, int, int] | None = None  # (n, co, slot) of resident weights loaded ahead
        self.parts: list[Load] = []  # the parts of those weights still to load, one behind each step


def _output_tile(q: _Queues, spec: ConvSpec, tile: Tile, tensors: tuple[str, str, str],
                 epilogue: Sequence[EpilogueOp], config: NpuConfig, options: Options, at: tuple[int, int, int],
                 aux_per_tile: int) -> None:
    n, oh, co = at
    inp, wgt, dst = tensors
    mac = mac_unit(spec)
    rows, cout = min(tile.rows, spec.out_h - oh), min(tile.cout, spec.cout - co)
    pitch, row_pitch = input_layout(spec, tile, rows, config, options.conflict_free)
    acc_slot = q.tile % q.slots
    aux_base = (q.tile % q.slots) * aux_per_tile
    ci_starts = [co] if spec.depthwise else range(0, spec.cin, tile.cin)
    for k, ci in enumerate(ci_starts):
        cin = cout if spec.depthwise else min(tile.cin, spec.cin - ci)
        slot = q.step % q.slots
        if q.step >= q.slots:
            q.out.append(Pop("load", mac))
        q.out.append(Load("inp", slot, inp, (n, oh * spec.stride - spec.pads[0], -spec.pads[1], ci),
                          (1, spec.in_rows(rows), spec.in_cols, cin), pitch, row_pitch, pack=spec.pack))
        resident = len(ci_starts) == 1
        if resident and q.prefetched is not None and q.prefetched[:2] == (n, co):
            q.wgt_slot, q.weights_for, q.prefetched = q.prefetched[2], (n, co), None
        if not resident or q.weights_for != (n, co):
            q.wgt_slot = q.weight_tiles % q.slots if resident else slot
            q.out.append(_weights(spec, wgt, q.wgt_slot, (ci, co), cin, cout))
            q.weights_for = (n, co) if resident else None
            q.weight_tiles += 1
        if k == 0:
            if aux_per_tile and mac != "vector" and q.tile >= q.slots:
                q.out.append(Pop("load", "vector"))  # the epilogue that read these aux slots is done
            _load_operands(q, spec, epilogue, (n, oh, co), rows, cout, aux_base)
        q.out.append(Push("load", mac))
        if resident and oh == tile.rows and q.slots > 1:
            _prefetch_weights(q, spec, tile, wgt, (n, co), config)
        if q.parts:
            q.out.append(q.parts.pop(0))
        q.out.append(Pop(mac, "load"))
        if k == 0 and q.tile >= q.slots:
            q.out.append(Pop(mac, "store"))
        q.out += [_mac(spec, slot, q.wgt_slot, acc_slot, (i, j), rows, k == 0 and i == j == 0)
                  for i in range(spec.kh) for j in range(spec.kw)]
        if k == len(ci_starts) - 1:
            q.out += _tile_epilogue(mac, epilogue, acc_slot, aux_base, aux_per_tile, options.overlap_epilogue)
        q.out.append(Push(mac, "load"))
        q.step += 1
    q.out += [Pop("store", "vector"), Store(acc_slot, dst, (n, oh, 0, co), (1, rows, spec.out_w, cout)),
              Push("store", mac)]
    q.tile += 1


def _weights(spec: ConvSpec, wgt: str, slot: int, at: tuple[int, int], cin: int, cout: int) -> Load:
    """The load of the weight tile for input channels from at[0] and output channels from at[1]."""
    ci, co = at
    return Load("wgt", slot, wgt, (0, 0, 0 if spec.depthwise else ci, co),
                (spec.kh, spec.kw, spec.weight_cin if spec.depthwise else cin, cout))


def next_weights(spec: ConvSpec, tile: Tile, at: tuple[int, int]) -> tuple[int, int] | None:
    """(image, first output channel) of the resident weight tile after `at`'s, in the loop nest's order."""
    n, co = at
    if co + tile.cout < spec.cout:
        return n, co + tile.cout
    return (n + 1, 0) if n + 1 < spec.n else None


def _prefetch_weights(q: _Queues, spec: ConvSpec, tile: Tile, wgt: str, at: tuple[int, int],
                      config: NpuConfig) -> None:
    """Resident weights of the next output-channel tile, loaded during the row tiles from the second on of
    this one instead of at its own first step, in parts along the input channels (kiln.npu.parts), one
    after the push of each of those steps: the other weight slot was last read by the step before this
    tile's first, whose compute->load token the load unit has just popped (two steps back), and each part
    delays only the next input load. Its first step then finds the weights there."""
    nxt = next_weights(spec, tile, at)
    if nxt is None:
        return
    slot = q.weight_tiles % q.slots
    cout = min(tile.cout, spec.cout - nxt[1])
    whole = _weights(spec, wgt, slot, (0, nxt[1]), spec.cin, cout)
    q.parts = [_weight_part(whole, c0, cin) for c0, cin in ahead_parts(spec, tile, cout, config)]
    q.prefetched = (*nxt, slot)
    q.weight_tiles += 1


def ahead_parts(spec: ConvSpec, tile: Tile, cout: int, config: NpuConfig) -> list[tuple[int, int]]:
    """(first input channel, channels) of the parts of a resident weight tile of `cout` output channels
    loaded ahead, spread over the row tiles from the second on (the cost model counts the same parts)."""
    cin = spec.weight_cin
    nbytes = spec.kh * spec.kw * cin * cout * spec.itemsize
    return parts.channel_parts(cin, nbytes, len(range(tile.rows, spec.out_h, tile.rows)), config)


def _weight_part(whole: Load, c0: int, cin: int) -> Load:
    """The load of input channels c0 .. c0 + cin of `whole`'s weight tile into its place in the slot."""
    start = (whole.start[0], whole.start[1], whole.start[2] + c0, whole.start[3])
    size = (whole.size[0], whole.size[1], cin, whole.size[3])
    return dataclasses.replace(whole, start=start, size=size, at=(0, 0, c0, 0), whole=whole.size)


def mac_unit(spec: ConvSpec) -> str:
    """The unit of a layer's multiply-adds: the matrix unit, or the vector unit for a depthwise layer."""
    return "vector" if spec.depthwise else "compute"


def _tile_epilogue(mac: str, epilogue: Sequence[EpilogueOp], acc_slot: int, aux_base: int, aux_per_tile: int,
                   overlap: bool) -> list[Instruction]:
    """A finished tile's epilogue on the vector unit and its hand-off to the store. After a GEMM the matrix
    unit passes the tile on (compute->vector) and, unless the epilogue overlaps its next GEMMs, waits for
    it (vector->compute); the vector unit frees the tile's aux slots (vector->load)."""
    ops = _epilogue(epilogue, acc_slot, aux_base)
    if mac == "vector":
        return [*ops, Push("vector", "store")]
    out: list[Instruction] = [Push("compute", "vector"), Pop("vector", "compute"), *ops, Push("vector", "store")]
    if aux_per_tile:
        out.append(Push("vector", "load"))
    if not overlap:
        out += [Push("vector", "compute"), Pop("compute", "vector")]
    return out


def _mac(spec: ConvSpec, slot: int, wgt_slot: int, acc_slot: int, offset: tuple[int, int], rows: int,
         reset: bool) -> Instruction:
    """One kernel offset's multiply-adds: a GEMM (its window column stepped by a packed layer's groups), or
    a depthwise one on the vector unit."""
    if spec.depthwise:
        return DepthwiseMac(slot, wgt_slot, acc_slot, *offset, spec.stride, rows, spec.out_w, reset)
    return Gemm(slot, wgt_slot, acc_slot, *offset, spec.stride, rows, spec.out_w, reset, spec.pack)


def _load_operands(q: _Queues, spec: ConvSpec, epilogue: Sequence[EpilogueOp], at: tuple[int, int, int], rows: int,
                   cout: int, aux_base: int) -> None:
    """The epilogue's tensor operands of one output tile, into its aux slots."""
    n, oh, co = at
    k = 0
    for e in epilogue:
        if e.tensor is None:
            continue
        start, size = ((0, 0, 0, co), (1, 1, 1, cout)) if e.per_channel else \
            ((n, oh, 0, co), (1, rows, spec.out_w, cout))
        q.out.append(Load("aux", aux_base + k, e.tensor, start, size))
        k += 1


def _epilogue(epilogue: Sequence[EpilogueOp], acc_slot: int, aux_base: int) -> list[Instruction]:
    out: list[Instruction] = []
    k = 0
    for e in epilogue:
        if e.tensor is None:
            out.append(Alu(e.op, acc_slot, imm=e.imm))
        else:
            out.append(Alu(e.op, acc_slot, aux_slot=aux_base + k))
            k += 1
    return out

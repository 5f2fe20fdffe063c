"""Pooling on the vector unit: output-row tiles of one channel block each, their input rows (with the
halo and the padding, filled with -inf for a max) loaded into the operand buffer, one Pool
instruction per tile, a store; double buffered with the same token discipline as lower_conv, the
vector unit's queue in the place of the matrix unit's."""

from __future__ import annotations

import math

import numpy as np

from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec
from kiln.npu.isa import Instruction, Load, Pool, Pop, Program, Push, Store
from kiln.npu.tiling import ACC_ITEMSIZE, NoTileFitsError


def pool_rows(spec: ConvSpec, channels: int, config: NpuConfig, slots: int) -> int:
    """The most output rows per tile whose input rows and result fit the operand and accumulator slots."""
    for rows in range(spec.out_h, 0, -1):
        src = spec.in_rows(rows) * spec.in_cols * channels * spec.itemsize
        acc = rows * spec.out_w * channels * ACC_ITEMSIZE
        if src <= config.aux_bytes // slots and acc <= config.acc_bytes // slots:
            return rows
    raise NoTileFitsError(f"no row of pooling {spec} fits the accelerator's buffers ({config.to_json()})")


def lower_pool(name: str, op: str, spec: ConvSpec, tensors: tuple[str, str], config: NpuConfig,
               double_buffer: bool = True) -> Program:
    """The program pooling DRAM tensors = (input, output); `spec` gives the window as a convolution's
    (cin == cout == channels)."""
    slots = 2 if double_buffer else 1
    channels = min(spec.cin, config.vector_lanes * 8)
    rows = pool_rows(spec, channels, config, slots)
    fill = -math.inf if op == "max" else 0.0
    out: list[Instruction] = []
    step = 0
    for n in range(spec.n):
        for c in range(0, spec.cin, channels):
            for oh in range(0, spec.out_h, rows):
                out += _tile(spec, tensors, op, (n, oh, c), min(rows, spec.out_h - oh), min(channels, spec.cin - c),
                             step, slots, fill)
                step += 1
    return Program(name, out, {"aux": slots, "acc": slots}, np.dtype(spec.dtype))


def _tile(spec: ConvSpec, tensors: tuple[str, str], op: str, at: tuple[int, int, int], rows: int, channels: int,
          step: int, slots: int, fill: float) -> list[Instruction]:
    n, oh, c = at
    slot = step % slots
    out: list[Instruction] = [Pop("load", "vector")] if step >= slots else []
    out += [Load("aux", slot, tensors[0], (n, oh * spec.stride - spec.pads[0], -spec.pads[1], c),
                 (1, spec.in_rows(rows), spec.in_cols, channels), fill=fill),
            Push("load", "vector"), Pop("vector", "load")]
    if step >= slots:
        out.append(Pop("vector", "store"))
    out += [Pool(op, slot, slot, spec.kh, spec.kw, spec.stride, rows, spec.out_w), Push("vector", "store"),
            Push("vector", "load"), Pop("store", "vector"),
            Store(slot, tensors[1], (n, oh, 0, c), (1, rows, spec.out_w, channels)), Push("store", "vector")]
    return out

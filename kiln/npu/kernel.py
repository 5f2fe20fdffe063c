"""A step lowered for the accelerator: its program and where each DRAM tensor the program names comes
from (a constant laid out at build time, or a value of the model computed earlier)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.ir.expr import Expr
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.isa import Program


@dataclass
class NpuKernel:
    """`program` over DRAM tensors: `constants` (laid out once), `operands` (model values, in the device
    layout), and the output `out` of `out_shape` (device layout), `kind` conv, dense or pool. An output kept
    on chip for the next kernels (kiln.npu.onchip) is the held tensor `held_output`, not a DRAM tensor."""

    name: str
    kind: str
    program: Program
    spec: ConvSpec
    tile: Tile | None
    constants: dict[str, np.ndarray]
    operands: dict[str, Expr]
    out_shape: tuple[int, int, int, int]
    epilogue: tuple[EpilogueOp, ...] = ()
    held_output: str | None = None

    def dram(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The DRAM tensors of one run: the constants, the operands' values and a fresh output (none when
        the output stays on chip)."""
        out = {} if self.held_output else {"out": np.zeros(self.out_shape, dtype=self.spec.dtype)}
        return {**self.constants, **values, **out}

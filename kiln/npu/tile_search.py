"""The cost model checked against the simulator on one kernel: every candidate tile lowered and timed
(timing only), next to the model's prediction; the model's pick is good when its simulated cycles are
within a few percent of the best candidate's."""

from __future__ import annotations

from dataclasses import dataclass

from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import Tile
from kiln.npu.cost_model import predict
from kiln.npu.effects import timed
from kiln.npu.kernel import NpuKernel
from kiln.npu.lower_conv import lower_conv
from kiln.npu.tiling import candidates


@dataclass(frozen=True)
class TileCheck:
    """Per candidate tile: (tile, simulated cycles, predicted cycles)."""

    kernel: str
    rows: list[tuple[Tile, int, int]]

    @property
    def best(self) -> int:
        return min(s for _, s, _ in self.rows)

    @property
    def picked(self) -> int:
        """Simulated cycles of the tile the cost model ranks first."""
        return min(self.rows, key=lambda r: r[2])[1]

    @property
    def pick_ratio(self) -> float:
        return self.picked / self.best


def check_tiles(kernel: NpuKernel, config: NpuConfig) -> TileCheck:
    """Every candidate of a conv or dense kernel, simulated and predicted; the kernel's tensors in DRAM (as
    lower_steps gives them with Options(onchip=False))."""
    operands = sum(e.tensor is not None for e in kernel.epilogue)
    rows = []
    for tile in candidates(kernel.spec, config, operands=operands):
        program = lower_conv(kernel.name, kernel.spec, tile, ("inp", "wgt", "out"), kernel.epilogue, config)
        variant = NpuKernel(kernel.name, kernel.kind, program, kernel.spec, tile, kernel.constants, kernel.operands,
                            kernel.out_shape, kernel.epilogue)
        rows.append((tile, timed(variant, config).cycles, predict(kernel.spec, tile, config,
                                                                   epilogue=kernel.epilogue).cycles))
    return TileCheck(kernel.name, rows)

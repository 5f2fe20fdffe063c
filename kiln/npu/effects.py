"""The effect of each optimization on a placed model, measured on the simulator (timing only): the
same steps lowered again with double buffering off, with the dense input layout instead of the
conflict-free one, with the simple tiling instead of the cost model's, with every intermediate going
through DRAM (no on-chip scheduling, kiln.npu.onchip), with small-channel layers unpacked
(kiln.npu.packing) and with the matrix unit waiting for each tile's epilogue (no epilogue overlap:
one compute queue, as VTA's) and with each kernel's first weights loaded by itself (no weight
prefetch, kiln.npu.prefetch)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.ir.expr import Function
from kiln.npu.config import NpuConfig
from kiln.npu.kernel import NpuKernel
from kiln.npu.lower_conv import ALL_ON, Options
from kiln.npu.lower_step import lower_steps
from kiln.npu.placement import Step
from kiln.npu.report import KernelLine, kernel_line
from kiln.npu.simulator import Simulator

VARIANTS: dict[str, tuple[Options, str]] = {
    "all optimizations": (ALL_ON, "cost-model"),
    "no double buffering": (Options(double_buffer=False), "cost-model"),
    "no conflict-free layout": (Options(conflict_free=False), "cost-model"),
    "simple tiling": (ALL_ON, "simple"),
    "no on-chip scheduling": (Options(onchip=False), "cost-model"),
    "no column packing": (Options(pack_columns=False), "cost-model"),
    "no epilogue overlap": (Options(overlap_epilogue=False), "cost-model"),
    "no weight prefetch": (Options(prefetch_weights=False), "cost-model"),
}


@dataclass(frozen=True)
class Effect:
    """One variant's totals over the accelerator kernels."""

    variant: str
    lines: list[KernelLine]

    @property
    def cycles(self) -> int:
        return sum(k.cycles for k in self.lines)

    @property
    def dma_bytes(self) -> int:
        return sum(k.dma_bytes for k in self.lines)

    @property
    def conflicts(self) -> int:
        return sum(k.conflicts for k in self.lines)

    @property
    def dma_hidden(self) -> float:
        """The share of DMA time hidden behind compute, over the kernels where compute dominates."""
        busy = [k for k in self.lines if k.compute_busy >= k.dma_busy]
        dma = sum(k.dma_busy for k in busy)
        exposed = sum(min(k.dma_busy, max(0, k.cycles - k.compute_busy)) for k in busy)
        return 1.0 - exposed / dma if dma else 1.0


def timed(kernel: NpuKernel, config: NpuConfig) -> KernelLine:
    """A kernel's report line from a timing-only run (DRAM and held tensors of the right shapes, never read)."""
    dram = kernel.dram({k: np.zeros(_device_shape(e.type.shape), kernel.spec.dtype)
                        for k, e in kernel.operands.items()})
    return kernel_line(kernel, Simulator(config).run(kernel.program, dram, functional=False), config)


def _device_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else (1, 1, *shape)


def measure(fn: Function, steps: list[Step], config: NpuConfig,
            variants: tuple[str, ...] = tuple(VARIANTS)) -> list[Effect]:
    """Each variant's kernels, lowered again from `fn`'s placed steps and timed."""
    out = []
    for variant in variants:
        options, tiling = VARIANTS[variant]
        lines = [timed(k, config) for k in lower_steps(fn, steps, config, options, tiling) if k is not None]
        out.append(Effect(variant, lines))
    return out


def format_effects(effects: list[Effect]) -> list[str]:
    base = effects[0].cycles
    out = [f"{'variant':26s} {'cycles':>12s} {'vs all':>7s} {'DMA bytes':>12s} {'conflicts':>9s} {'DMA hidden':>10s}"]
    for e in effects:
        out.append(f"{e.variant:26s} {e.cycles:12d} {e.cycles / base:6.2f}x {e.dma_bytes:12d} {e.conflicts:9d} "
                   f"{e.dma_hidden:10.1%}")
    return out

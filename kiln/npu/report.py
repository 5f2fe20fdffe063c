"""What a run on the simulated accelerator cost, per kernel: cycles, the unit's utilization against the
layer's roofline (the larger of its ideal compute cycles and its DMA bytes at full bandwidth; a layer
is DMA-bound when the second is larger; the load and the store units have a DMA port each, so the
busier port sets it, with the bytes this kernel's tiling moves), bytes moved, bank conflicts, and
the transfers to the CPU."""

from __future__ import annotations

from dataclasses import dataclass

from kiln.npu.config import NpuConfig
from kiln.npu.kernel import NpuKernel
from kiln.npu.simulator import SimStats

MATRIX_KINDS = ("conv", "dense")


@dataclass(frozen=True)
class KernelLine:
    """One kernel's row of the report."""

    name: str
    kind: str
    cycles: int
    ideal: int  # cycles of its unit at full rate
    dma_floor: int  # cycles of the busier DMA port's bytes at full bandwidth
    dma_bytes: int
    conflicts: int
    dma_busy: int
    compute_busy: int  # of the busier compute unit (matrix or vector)

    @property
    def bound(self) -> str:
        return "compute" if self.ideal >= self.dma_floor else "DMA"

    @property
    def utilization(self) -> float:
        """The share of the run's cycles its unit did useful work."""
        return self.ideal / self.cycles if self.cycles else 0.0

    @property
    def of_roofline(self) -> float:
        """Achieved over attainable: the roofline's cycles over the run's."""
        return max(self.ideal, self.dma_floor) / self.cycles if self.cycles else 0.0

    @property
    def dma_hidden(self) -> float:
        """The share of DMA time that did not add to the run (it overlapped compute)."""
        exposed = max(0, self.cycles - self.compute_busy)
        return 1.0 - min(exposed, self.dma_busy) / self.dma_busy if self.dma_busy else 1.0


def kernel_line(kernel: NpuKernel, stats: SimStats, config: NpuConfig) -> KernelLine:
    rate = config.macs_per_cycle if kernel.kind in MATRIX_KINDS else config.vector_lanes
    work = stats.macs if kernel.kind != "pool" else kernel.spec.n * kernel.spec.out_h * kernel.spec.out_w * \
        kernel.spec.cout * kernel.spec.kh * kernel.spec.kw
    return KernelLine(kernel.name, kernel.kind, stats.cycles, -(-work // rate),
                      -(-max(stats.dma_bytes - stats.stored_bytes, stats.stored_bytes) // config.dma_bytes_per_cycle),
                      stats.dma_bytes, stats.conflicts,
                      stats.busy["load"] + stats.busy["store"], max(stats.busy["compute"], stats.busy["vector"]))


def format_lines(lines: list[KernelLine], config: NpuConfig) -> list[str]:
    """The per-kernel table and its totals."""
    out = [f"{'kernel':28s} {'kind':9s} {'cycles':>10s} {'bound':>7s} {'util':>6s} {'of roof':>7s} "
           f"{'DMA hid':>7s} {'bytes':>11s} {'conflicts':>9s}"]
    for k in lines:
        out.append(f"{k.name:28s} {k.kind:9s} {k.cycles:10d} {k.bound:>7s} {k.utilization:6.1%} "
                   f"{k.of_roofline:7.1%} {k.dma_hidden:7.1%} {k.dma_bytes:11d} {k.conflicts:9d}")
    cycles = sum(k.cycles for k in lines)
    matrix = [k for k in lines if k.kind in MATRIX_KINDS and k.bound == "compute"]
    util = sum(k.ideal for k in matrix) / max(1, sum(k.cycles for k in matrix))
    out.append(f"total: {cycles} cycles ({cycles / config.clock_mhz:.1f} us at {config.clock_mhz} MHz), "
               f"{sum(k.dma_bytes for k in lines)} bytes moved, {sum(k.conflicts for k in lines)} bank conflicts; "
               f"matrix unit on compute-bound layers: {util:.1%} utilized")
    return out

"""The text `kiln run` and `kiln bench` print after a run on the simulated accelerator: the kernels'
table (kiln.npu.report), the transfers between CPU and accelerator, how fast the simulator ran, and
(when asked) the effect of each optimization (kiln.npu.effects)."""

from __future__ import annotations

from typing import Any

from kiln.errors import KilnError
from kiln.npu import effects
from kiln.npu.executor import NpuExecutor
from kiln.npu.report import format_lines, kernel_line


def run_report(model: Any, wall_s: float | None = None, with_effects: bool = True) -> list[str]:
    """The report of `model`'s (a model built for npu-sim) latest run on this thread."""
    runner = model.runner
    if not isinstance(runner, NpuExecutor) or runner.last_run is None:
        raise KilnError("no run on the simulated accelerator to report: build for target 'npu-sim' and run first")
    cost, config = runner.last_run, runner.config
    out = ["simulated accelerator (npu-sim): " + config.to_json()]
    out += format_lines([kernel_line(k, s, config) for k, s in cost.kernels], config)
    on_host = runner.cpu.on_host if runner.cpu else []
    out.append(f"CPU steps: {cost.cpu_steps} ({cost.cpu_regions} run(s) of the C library"
               + (f"; on the references: {', '.join(on_host)}" if on_host else "") + "); transfers between CPU "
               f"and accelerator: {cost.transfers} ({cost.transfer_bytes} bytes)")
    if wall_s:
        out.append(f"simulator: {cost.total().instructions} instructions in {wall_s:.2f} s "
                   f"({cost.total().instructions / wall_s:.0f} instructions/s, functional and cycles)")
    if with_effects:
        out.append("effect of each optimization (cycles of the accelerator kernels, timing-only runs):")
        out += effects.format_effects(effects.measure(runner.mod.main, [s for s, _ in runner.steps], config))
    return out

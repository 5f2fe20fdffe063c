"""`kiln.build(model, target="npu-sim")`: the graph passes that keep operators whole (no blocked
layouts, no fusion into C kernels), placement on the accelerator by rule, and each accelerator step
tiled and lowered to a program. The result is a CompiledModel whose runner is an NpuExecutor."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from kiln.compiler.compiled_model import CompiledModel
from kiln.compiler.driver import build
from kiln.compiler.report import BuildReport
from kiln.errors import ArtifactError, KilnError
from kiln.frontend.onnx import from_onnx
from kiln.ir.module import IRModule, param_bytes
from kiln.npu.config import NpuConfig
from kiln.npu.cpu_steps import CpuSteps
from kiln.npu.executor import NpuExecutor
from kiln.npu.int8_placement import int8_steps
from kiln.npu.int8_weights import Int8Weights
from kiln.npu.lower_conv import ALL_ON, Options
from kiln.npu.lower_step import TILINGS, lower_steps
from kiln.npu.placement import place, summary
from kiln.target import Target
from kiln.transform import PASSES
from kiln.transform.infra import PassContext, Sequential
from kiln.transform.pipeline import STANDARD

# The standard pipeline up to the CPU's layout and fusion passes; parallel convolutions stay apart (a
# combined one ends in a split, a CPU step between two accelerator steps).
NPU_PASSES = [p for p in STANDARD[:STANDARD.index("alter-op-layout")]
              if p not in ("combine-parallel-conv2d", "combine-parallel-dense")]


def build_npu(model: Any, target: Target, opt_level: int = 2, *, config: NpuConfig | None = None,
              options: Options = ALL_ON, tiling: str = "cost-model",
              progress: Callable[[str], None] | None = None) -> CompiledModel:
    """`model` (an IRModule or an ONNX model / path / bytes) compiled for the simulated accelerator."""
    if tiling not in TILINGS:
        raise KilnError(f"tiling {tiling!r} is not one of {', '.join(TILINGS)}")
    config = config or NpuConfig()
    report = BuildReport()
    mod = model if isinstance(model, IRModule) else _imported(model, report, progress)
    report.weights_bytes = param_bytes(mod)
    t0 = time.perf_counter()
    int8_weights = Int8Weights.collect(mod)  # before folding dequantizes them
    ctx = PassContext(opt_level, target=target)
    mod = Sequential(tuple(PASSES[n] for n in NPU_PASSES if n in PASSES))(mod, ctx)
    report.add("optimize", time.perf_counter() - t0, f"{len(NPU_PASSES)} passes", progress)
    t0 = time.perf_counter()
    steps = place(mod.main, partial(int8_steps, weights=int8_weights))
    kernels = lower_steps(mod.main, steps, config, options, tiling)
    report.kernels = sum(k is not None for k in kernels)
    where = summary(steps)
    report.add("lower", time.perf_counter() - t0, f"{where['npu']} accelerator kernel(s), {where['cpu']} CPU "
               f"step(s), {sum(len(k.program.instructions) for k in kernels if k)} instructions", progress)
    t0 = time.perf_counter()
    cpu = CpuSteps.build(mod.main, steps, partial(_build_cpu, opt_level=opt_level))
    if cpu is not None:
        report.add("cpu steps", time.perf_counter() - t0, f"{len(cpu.regions)} region(s) of CPU steps in one "
                   "library", progress)
    runner = NpuExecutor(mod, list(zip(steps, kernels)), config, cpu)
    return NpuModel(mod, "npu", runner, opt_level, target=target, report=report)  # type: ignore[arg-type]


class NpuModel(CompiledModel):
    """A model built for the simulated accelerator: it runs in this process, on the simulator."""

    def export(self, directory: str | os.PathLike) -> Path:
        raise ArtifactError(f"cannot save a model built for npu-sim to {directory}: its programs run on the "
                            "simulator in this process; run it with `kiln run/bench MODEL --target npu-sim` or "
                            "kiln.InferenceSession(model, target='npu-sim')")


def _build_cpu(mod: IRModule, opt_level: int) -> CompiledModel:
    """The CPU steps' module built for this machine, on the graph executor (run a region at a time)."""
    return build(mod, Target.host(), opt_level, executor="graph")


def _imported(model: Any, report: BuildReport, progress: Callable[[str], None] | None) -> IRModule:
    t0 = time.perf_counter()
    mod = from_onnx(model)
    report.add("import", time.perf_counter() - t0, f"{len(mod.input_names)} input(s)", progress)
    return mod

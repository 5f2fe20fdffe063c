"""Runs a model placed on the accelerator: accelerator steps on the simulator, the others on the CPU
(Kiln's C kernels, one library, kiln.npu.cpu_steps), with every tensor that crosses between them
converted (NCHW on the CPU, NHWC in the accelerator's DRAM; a uint8 tensor held as int8 there, shifted
by -128) and counted as a transfer.

`last_run` holds what the latest run cost: each kernel's SimStats and the transfers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.errors import InputError
from kiln.ir.expr import Constant, Expr, Tuple, TupleGetItem, Var
from kiln.ir.input_check import check_input
from kiln.ir.module import IRModule
from kiln.npu.config import NpuConfig
from kiln.npu.cpu_steps import CpuSteps
from kiln.npu.kernel import NpuKernel
from kiln.npu.placement import Step
from kiln.npu.simulator import SimStats, Simulator


@dataclass
class RunCost:
    """One run: per accelerator kernel its stats, and the tensors moved between CPU and accelerator."""

    kernels: list[tuple[NpuKernel, SimStats]] = field(default_factory=list)
    transfers: int = 0
    transfer_bytes: int = 0
    cpu_steps: int = 0
    cpu_regions: int = 0  # runs of consecutive CPU steps, each through the C library's kernels

    def total(self) -> SimStats:
        out = SimStats()
        for _, s in self.kernels:
            out.add(s)
        return out


class NpuExecutor:
    """The steps of `mod`'s main, each accelerator step with its kernel."""

    def __init__(self, mod: IRModule, steps: list[tuple[Step, NpuKernel | None]], config: NpuConfig,
                 cpu: CpuSteps | None = None):
        self.mod, self.steps, self.config, self.cpu = mod, steps, config, cpu
        self.simulator = Simulator(config)
        # the CPU steps' compiled kernels and library (kiln.runtime.footprint reads these)
        self.kernels: dict[int, Any] = cpu.executor.kernels if cpu else {}
        self.library = cpu.executor.library if cpu else None
        self._last = threading.local()

    @property
    def last_run(self) -> RunCost | None:
        """The cost of this thread's latest run."""
        return getattr(self._last, "cost", None)

    def run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        main = self.mod.main
        values = _Values(self._inputs(main.params, feeds))
        cost = RunCost()
        onchip: dict[str, np.ndarray] = {}  # the held tensors, from their producer to their last reader
        for step, kernel in self.steps:
            if kernel is None:
                self._cpu_step(step, values, cost)
            else:
                dram = kernel.dram({k: values.device(e, cost) for k, e in kernel.operands.items()})
                cost.kernels.append((kernel, self.simulator.run(kernel.program, dram, onchip=onchip)))
                if kernel.held_output is None:
                    values.set_device(step.result, dram["out"])
        self._last.cost = cost
        body = main.body
        fields = body.fields if isinstance(body, Tuple) else (body,)
        return [values.host(f, cost) for f in fields]

    def _cpu_step(self, step: Step, values: _Values, cost: RunCost) -> None:
        """A CPU step: its region of the C library when it starts one (the rest of the region ran with it)."""
        cost.cpu_steps += 1
        region = self.cpu.first.get(id(step)) if self.cpu else None
        if region is not None:
            for call, value in self.cpu.run(region, lambda e: values.host(e, cost)):  # type: ignore[union-attr]
                values.set_host(call, value)
            cost.cpu_regions += 1

    @staticmethod
    def _inputs(params: tuple[Var, ...], feeds: dict[str, Any]) -> dict[int, np.ndarray]:
        missing = [p.name for p in params if p.name not in feeds]
        if missing:
            raise InputError(f"missing input(s) {', '.join(missing)}; the model's inputs are "
                             f"{', '.join(p.name for p in params)}")
        dims: dict[str, int] = {}
        return {id(p): check_input(p.name, np.asarray(feeds[p.name]), p.type, dims) for p in params}


class _Values:
    """Each value of a run where it lives: on the host (its own layout) and/or in DRAM (NHWC, or
    (1, 1, M, K) for a matrix); a copy to the other side is a counted transfer."""

    def __init__(self, inputs: dict[int, np.ndarray]):
        self.on_host: dict[int, Any] = dict(inputs)
        self.on_device: dict[int, np.ndarray] = {}
        self.shapes: dict[int, tuple[int, ...]] = {}

    def set_host(self, e: Expr, value: Any) -> None:
        self.on_host[id(e)] = value

    def set_device(self, e: Expr, value: np.ndarray) -> None:
        self.on_device[id(e)] = value
        self.shapes[id(e)] = tuple(e.type.shape)

    def host(self, e: Expr, cost: RunCost) -> Any:
        key = id(e)
        if key in self.on_host:
            return self.on_host[key]
        if isinstance(e, Constant):
            return e.data
        if isinstance(e, TupleGetItem) and key not in self.on_device:
            return self.host(e.tuple_value, cost)[e.index]
        if isinstance(e, Tuple):
            return tuple(self.host(f, cost) for f in e.fields)
        if isinstance(e, tuple) and not e:
            return e
        value = self.on_device[key]
        shape = self.shapes[key]
        host = value.transpose(0, 3, 1, 2) if len(shape) == 4 else value.reshape(shape)
        if e.type.dtype == "uint8":
            host = host.view(np.uint8) ^ np.uint8(0x80)
        self.on_host[key] = np.ascontiguousarray(host)
        cost.transfers += 1
        cost.transfer_bytes += value.nbytes
        return self.on_host[key]

    def device(self, e: Expr, cost: RunCost) -> np.ndarray:
        key = id(e)
        if key in self.on_device:
            return self.on_device[key]
        value = np.asarray(self.host(e, cost))
        dev = value.transpose(0, 2, 3, 1) if value.ndim == 4 else value.reshape(1, 1, *value.shape)
        if value.dtype == np.uint8:
            dev = (dev ^ np.uint8(0x80)).view(np.int8)
        self.on_device[key] = np.ascontiguousarray(dev)
        cost.transfers += 1
        cost.transfer_bytes += value.nbytes
        return self.on_device[key]

"""The "counted" memory strategy: an AOT-compiled model run one kernel call at a time, each intermediate
tensor taken from a pool allocator (kiln.runtime.pool_allocator) before its first write and given back
after its last read.

Where the arena strategy holds the planned arena for the life of the model, this holds only what
the run in progress has live, at the price of a Python call per kernel (the AOT library exports every
kernel, so the same library serves both). The steps come in the planned order (the minimum-peak
one), with what each allocates and frees; the bound a run must fit (its memory limit, else what the
machine has) is checked against the order's simulated peak before any kernel runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kiln.errors import KernelError
from kiln.ir.input_check import check_input
from kiln.ir.sizes import check_bytes, current_limit
from kiln.runtime.aot_executor import AotExecutor
from kiln.runtime.pool_allocator import PoolAllocator


@dataclass(frozen=True)
class Slot:
    """Where a kernel argument lives: inputs[index], weights[index], outputs[index] or pool tensor `index`."""

    kind: Literal["input", "weight", "output", "pool"]
    index: int


@dataclass(frozen=True)
class CountedStep:
    kernel: str  # the exported kernel's name
    args: tuple[Slot, ...]  # one per kernel parameter
    allocs: tuple[int, ...]  # pool tensors it writes, allocated before it runs
    frees: tuple[int, ...]  # pool tensors it reads last, freed after it runs


@dataclass(frozen=True)
class CountedProgram:
    steps: tuple[CountedStep, ...]
    tensors: dict[int, tuple[tuple[int, ...], str]]  # pool tensor -> (shape, numpy dtype string)
    copies: tuple[tuple[int, Slot], ...]  # model output k <- a tensor no kernel writes there

    def to_json(self) -> dict[str, Any]:
        def slots(args):
            return [[s.kind, s.index] for s in args]

        return {"steps": [[s.kernel, slots(s.args), list(s.allocs), list(s.frees)] for s in self.steps],
                "tensors": [[t, list(shape), dt] for t, (shape, dt) in self.tensors.items()],
                "copies": [[k, s.kind, s.index] for k, s in self.copies]}

    @staticmethod
    def from_json(rec: dict[str, Any]) -> CountedProgram:
        steps = tuple(CountedStep(str(k), tuple(Slot(kind, int(i)) for kind, i in args), tuple(map(int, a)),
                                  tuple(map(int, f))) for k, args, a, f in rec["steps"])
        tensors = {int(t): (tuple(map(int, shape)), str(dt)) for t, shape, dt in rec["tensors"]}
        return CountedProgram(steps, tensors, tuple((int(k), Slot(kind, int(i))) for k, kind, i in rec["copies"]))


@dataclass(frozen=True)
class PoolStats:
    """What the pool did in the last run: the most bytes live at once and held (live + free blocks)."""

    peak_live: int
    peak_held: int


class CountedExecutor(AotExecutor):
    """An AotExecutor whose runs call the kernels one by one over pool-allocated tensors (see the module
    doc). It allocates no arena; runs do not share buffers, so they need no lock."""

    def __init__(self, mod, weights, outputs, library, report, calls, program: CountedProgram,
                 function: Callable[[str], Callable[..., Any]]):
        """`function(name)`: the library's kernel of that name, callable on numpy arrays (a CFunction)."""
        super().__init__(mod, weights, outputs, 0, library, report, calls)
        self.program = program
        self._fns = {s.kernel: function(s.kernel) for s in program.steps}
        self.last_pool: PoolStats | None = None

    def run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        return self._run_steps(feeds, None)

    def profile(self, feeds: dict[str, Any], runs: int = 1) -> list[tuple[str, float]]:
        seconds = [0.0] * len(self.program.steps)
        for _ in range(runs):
            self._run_steps(feeds, seconds)
        return [(s.kernel, t / runs) for s, t in zip(self.program.steps, seconds)]

    def _run_steps(self, feeds: dict[str, Any], seconds: list[float] | None) -> list[np.ndarray]:
        inputs = self._inputs(feeds)
        report = self.memory_report()
        check_bytes(f"the live intermediate tensors at the peak of the planned order (memory strategy "
                    f"'counted', arena {report.arena_bytes} bytes if planned)", report.lower_bound)
        pool = PoolAllocator(current_limit()[0])
        outs = [np.empty(shape, dtype) for shape, dtype in self.output_layout]
        where = {"input": inputs, "weight": self.weights, "output": outs, "pool": {}}
        tensors = self.program.tensors
        for k, step in enumerate(self.program.steps):
            for t in step.allocs:
                shape, dtype = tensors[t]
                where["pool"][t] = pool.allocate(shape, np.dtype(dtype), f"a tensor of {step.kernel}")
            t0 = time.perf_counter()
            try:
                self._fns[step.kernel](*(where[s.kind][s.index] for s in step.args))
            except KernelError as err:
                where_ = f" ({self.calls[k]})" if k < len(self.calls) else ""
                raise KernelError(f"{err}{where_}") from None
            if seconds is not None:
                seconds[k] += time.perf_counter() - t0
            for t in step.frees:
                pool.free(where["pool"].pop(t))
        for k, slot in self.program.copies:
            outs[k][...] = where[slot.kind][slot.index]
        self.last_pool = PoolStats(pool.peak_live, pool.peak_held)
        return outs

    def _inputs(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        names = [n for n, _ in self._params]
        if len(feeds) != len(names) or not all(n in feeds for n in names):
            self._refuse_names(feeds)
        arrays = []
        for name, t in self._params:
            arrays.append(np.asarray(check_input(name, feeds[name], t, {}), order="C"))
        return arrays

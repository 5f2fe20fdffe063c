"""`CompiledModel`: what kiln.build returns, the optimized model with the executor that runs it.

Besides `run`, `run_async` (a Future; runs overlap, kiln.runtime.async_runs) and, for an AOT model,
`start`: a run that can be cancelled and resumed (kiln.runtime.run_handle)."""

from __future__ import annotations

import os
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.compiler.lower import lower_groups
from kiln.compiler.report import BuildReport
from kiln.errors import AotError
from kiln.ir import sizes
from kiln.ir.module import IRModule
from kiln.ir.types import SizeVar, TensorType, TupleType
from kiln.runtime import artifact
from kiln.runtime.aot_executor import AotExecutor
from kiln.runtime.async_runs import RunQueue
from kiln.runtime.executor import GraphExecutor
from kiln.runtime.pool_runs import PoolRuns
from kiln.runtime.run_handle import PreemptibleRun
from kiln.runtime.shape_specialized import ShapeSpecialized
from kiln.runtime.thread_pool import Partition
from kiln.target import Target, compiler_identity, find_compiler, host_cores
from kiln.tune.apply import Tuned


@dataclass
class TensorInfo:
    """A model input or output: dims are ints or symbolic names."""

    name: str
    shape: tuple[int | str, ...] | None
    dtype: str


@dataclass
class CompiledModel:
    """A built model: `run(feeds)` on its executor (or the per-shape AOT builds), `export` to a directory."""

    mod: IRModule  # optimized and fused
    executor: str  # "aot" or "graph"
    runner: AotExecutor | GraphExecutor
    opt_level: int
    report: BuildReport = field(default_factory=BuildReport)
    tuned: Tuned | None = None  # the tuning records' configs the kernels were scheduled with
    per_shape: ShapeSpecialized | None = None  # static builds per input shapes, the graph runner behind them
    target: Target = field(default_factory=Target.host)  # the machine the kernels were built for
    memory_limit: int | None = None  # bytes any one tensor (and the arena) of a run may take; None: what is available
    queue: RunQueue = field(default_factory=lambda: RunQueue(host_cores()), repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.runner, AotExecutor) and self.target.threading == "kiln":
            self.runner.run_control = PoolRuns()  # its kernels launch into the pool: a cancel reaches them

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        if self.memory_limit is None:
            return self._run(feeds)
        with sizes.memory_limit(self.memory_limit):
            return self._run(feeds)

    def run_async(self, feeds: dict[str, Any]) -> Future:
        """`run(feeds)` on one of the model's worker threads; the Future holds its outputs or its error."""
        return self.queue.submit(self.run, feeds)

    def start(self, feeds: dict[str, Any], partition: Partition | None = None) -> PreemptibleRun:
        """A run that can be cancelled and resumed (AotExecutor.start), on `partition` of Kiln's
        pool (default: every core); it takes its arena now, under the model's memory limit."""
        if not isinstance(self.runner, AotExecutor) or self.per_shape is not None:
            raise AotError("only a model compiled ahead of time (static input shapes, executor='aot') "
                           f"runs preemptibly; this one runs on the {self.executor} executor")
        control = PoolRuns(partition) if partition is not None and self.target.threading == "kiln" else None
        with sizes.memory_limit(self.memory_limit):
            return self.runner.start(feeds, control)

    def _run(self, feeds: dict[str, Any]) -> list[Any]:
        if self.per_shape is not None:
            return self.per_shape.run(feeds)
        return self.runner.run(feeds)

    @property
    def host_groups(self) -> list[str]:
        return list(getattr(self.runner, "host_groups", []))

    @property
    def library(self) -> Any:
        """The loaded library (with `.path` and the ctypes handle `.lib`), None without kernels."""
        return self.runner.library

    @property
    def inputs(self) -> list[TensorInfo]:
        return [_info(p.name, p.type) for p in self.mod.main.params]

    @property
    def outputs(self) -> list[TensorInfo]:
        t = self.mod.main.body.type
        types = list(t.fields) if isinstance(t, TupleType) else [t]
        names = list(self.mod.output_names) or [f"output{i}" for i in range(len(types))]
        return [_info(n, ty) for n, ty in zip(names, types)]

    def export(self, directory: str | os.PathLike) -> Path:
        """Save library, graph and weights to `directory`; kiln.load(directory) runs it again."""
        info = {"target": str(self.target), "opt_level": self.opt_level, "built_with": self.executor,
                "compiler": compiler_identity(find_compiler(self.target.cc)).splitlines()[0],
                "inputs": [vars(i) for i in self.inputs], "outputs": [vars(o) for o in self.outputs]}
        aot = self.runner if isinstance(self.runner, AotExecutor) else None
        return artifact.export(directory, self._graph_state(), info, aot)

    def _graph_state(self) -> GraphExecutor:
        """The kernel-by-kernel view of the same library (the AOT library exports every kernel too)."""
        if isinstance(self.runner, GraphExecutor):
            return self.runner
        _, kernel_of, host = lower_groups(self.mod, self.tuned, target=self.target)
        lib = self.runner.library
        return artifact.assemble(self.mod, kernel_of, host, lambda k: lib.get_function(k.func.name), lib)


def _info(name: str, t: Any) -> TensorInfo:
    if not isinstance(t, TensorType) or t.shape is None:
        return TensorInfo(name, None, str(t))
    return TensorInfo(name, tuple(d.name if isinstance(d, SizeVar) else d if isinstance(d, int) else "?"
                                  for d in t.shape), t.dtype)

"""`Model`: a model ready to run, as `kiln.load` gives it: the fused IR, the executor that runs it,
its inputs and outputs, `export`. Besides `run`, `run_async` (a Future; runs overlap,
kiln.runtime.async_runs) and, for an AOT model, `start`: a run that can be cancelled and resumed
(kiln.runtime.run_handle). kiln.compiler's `CompiledModel` (what `kiln.build` returns) is a
Model with its build report and tuning added; this half lives in the runtime so that running a
saved model imports no compiler package."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kiln.errors import AotError, ArtifactError
from kiln.ir import sizes
from kiln.ir.types import SizeVar, TensorType
from kiln.runtime import artifact
from kiln.runtime.aot_executor import AotExecutor
from kiln.runtime.async_runs import RunQueue
from kiln.runtime.footprint import Footprint, arena_bytes, code_bytes, kernel_weights
from kiln.runtime.pool_runs import PoolRuns
from kiln.runtime.process_memory import resident_bytes
from kiln.runtime.run_handle import PreemptibleRun
from kiln.runtime.saved_graph import SavedGraph
from kiln.runtime.thread_pool import Partition
from kiln.target import Target, compiler_identity, find_compiler, host_cores

if TYPE_CHECKING:
    import os
    from pathlib import Path

    from kiln.ir.module import IRModule
    from kiln.runtime.executor import GraphExecutor
    from kiln.runtime.shape_specialized import ShapeSpecialized


@dataclass
class TensorInfo:
    """A model input or output: dims are ints or symbolic names."""

    name: str
    shape: tuple[int | str, ...] | None
    dtype: str


@dataclass
class Model:
    """`run(feeds)` on its executor (or the per-shape AOT builds), `export` to a directory."""

    mod: IRModule  # optimized and fused
    executor: str  # "aot", "dataflow" or "graph"
    runner: AotExecutor | GraphExecutor
    opt_level: int
    per_shape: ShapeSpecialized | None = None  # static builds per input shapes, the graph runner behind them
    target: Target = field(default_factory=Target.host)  # the machine the kernels were built for
    memory_limit: int | None = None  # bytes any one tensor (and the arena) of a run may take; None: what is available
    graph: GraphExecutor | None = None  # a loaded AOT model's kernel-by-kernel view of its library (for export)
    weights_bytes: int | None = None  # the weights as imported, before packing (None: not known)
    queue: RunQueue = field(default_factory=lambda: RunQueue(host_cores()), repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.runner, AotExecutor) and self.target.threading == "kiln":
            self.runner.run_control = PoolRuns()  # its kernels launch into the pool: a cancel reaches them

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        if self.memory_limit is None:
            return self._run(feeds)
        with sizes.memory_limit(self.memory_limit):
            _check_arena(self.runner)
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
            if self.memory_limit is not None:
                _check_arena(self.runner)  # an idle arena the pool hands back is checked here, as run() checks
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
        return interface(self.mod)[0]

    @property
    def outputs(self) -> list[TensorInfo]:
        return interface(self.mod)[1]

    def footprint(self, rss_after_run: int | None = None) -> Footprint:
        """What the model holds now: its weights as imported and as the kernels read them, arena, code, and
        this process's resident memory; `rss_after_run`: the resident bytes a caller measured after a run."""
        packed = sum(a.nbytes for a in kernel_weights(self.runner))
        return Footprint(self.weights_bytes, packed, arena_bytes(self.runner), code_bytes(self.library),
                         resident_bytes(), rss_after_run)

    def export(self, directory: str | os.PathLike) -> Path:
        """Save library, graph and weights to `directory`; kiln.load(directory) runs it again."""
        info = {"target": str(self.target), "opt_level": self.opt_level, "built_with": self.executor,
                "compiler": compiler_identity(find_compiler(self.target.cc)).splitlines()[0],
                "inputs": [vars(i) for i in self.inputs], "outputs": [vars(o) for o in self.outputs],
                "weights_bytes": self.weights_bytes, **self._saved_notes()}
        aot = self.runner if isinstance(self.runner, AotExecutor) else None
        return artifact.export(directory, self._graph_state(), info, aot)

    def _saved_notes(self) -> dict[str, Any]:
        """What else export writes into model.json: a built model adds what its build knows."""
        return {}

    def _graph_state(self) -> GraphExecutor:
        """The kernel-by-kernel view of the library (the AOT library exports every kernel too)."""
        if not isinstance(self.runner, AotExecutor):
            return self.runner
        if self.graph is None and isinstance(self.mod, SavedGraph):
            self.graph = self.mod.executor()  # a loaded AOT model's, parsed now
        if self.graph is None:
            raise ArtifactError("this model has no kernel-by-kernel view of its library to save")
        return self.graph


def _check_arena(runner: Any) -> None:
    """MemoryLimitError before a run when the limit in force is below the planned arena (a model built or
    saved without the limit); a counted run checks its order's peak itself."""
    report = runner.memory_report() if isinstance(runner, AotExecutor) else None
    if report is not None and report.strategy == "arena":
        sizes.check_bytes(f"the arena of intermediate tensors (memory strategy 'arena'; live-bytes peak "
                          f"{report.lower_bound} bytes, naive sum {report.naive_bytes} bytes)", report.arena_bytes)


def interface(mod: IRModule) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """(inputs, outputs) of a module's main, as a session describes them."""
    types = mod.output_types
    names = list(mod.output_names) or [f"output{i}" for i in range(len(types))]
    return [_info(p.name, p.type) for p in mod.input_vars], [_info(n, ty) for n, ty in zip(names, types)]


def _info(name: str, t: Any) -> TensorInfo:
    if not isinstance(t, TensorType) or t.shape is None:
        return TensorInfo(name, None, str(t))
    return TensorInfo(name, tuple(d.name if isinstance(d, SizeVar) else d if isinstance(d, int) else "?"
                                  for d in t.shape), t.dtype)

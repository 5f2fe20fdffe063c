"""`kiln.InferenceSession` and `kiln.load`: onnxruntime's calling convention over a compiled model.

A session is built from an ONNX model (compiled on the spot) or from a directory written by
`CompiledModel.export` / `kiln compile` (loaded without compiling, or importing the compiler).
`threads` is how many cores the kernels run on. With Kiln threading (target -threading=kiln) the
session holds a partition of that many cores of the process's pool (kiln.runtime.thread_pool),
disjoint from other sessions' where the cores allow, and runs on it. With OpenMP threading it caps
the OpenMP threads, set on the calling thread before every run, because OpenMP keeps the setting per
thread. Without `threads`, a model built for fewer cores than this machine has (its target's
`cores`) runs that many threads: its parallel loops were split for them, and more threads would
share them unevenly. Otherwise every core is used.

A session built from an ONNX model is tiered (kiln.runtime.tiers): its first runs go at once to Kiln's
shape-generic kernels (kiln.runtime.generic_executor) while `kiln.build` compiles the model's own
kernels on a background thread; runs go to those from the first run that starts after they are ready,
never a run split between the two. `status` says which tier runs and how far the build is;
`model` (the compiled model) waits for the build. `wait_for_compile=True` builds first, as before tiers
existed; so does any `executor` but "auto" (an executor asked for is one to compile).

`run_async` returns a `concurrent.futures.Future` at once and runs on one of the model's worker
threads (kiln.runtime.async_runs); `await session.run_asyncio(...)` is the same for asyncio. Many
requests may be in flight from many threads: the GIL is released while kernels run and each run of
an AOT model has an arena of its own, so runs of one model, and of different models, overlap.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.codegen import openmp_env
from kiln.errors import InputError, KilnError
from kiln.ir import sizes
from kiln.ir.module import IRModule
from kiln.runtime import artifact
from kiln.runtime.aot_executor import check_strategy
from kiln.runtime.async_runs import RunQueue
from kiln.runtime.model import Model, TensorInfo
from kiln.runtime.run_handle import PreemptibleRun
from kiln.runtime.thread_pool import Partition, running, runtime
from kiln.runtime.tiers import SPECIALIZED, Tiers, TierStatus
from kiln.target import Target, host_cores

if TYPE_CHECKING:
    from kiln.runtime.generic_executor import GenericExecutor

# onnxruntime's spelling of tensor element types
_ORT_TYPES = {"float32": "float", "float64": "double", "bool": "bool", "float16": "float16",
              "bfloat16": "bfloat16", "string": "string"}


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: shape dims are ints or symbolic names."""

    name: str
    shape: list[int | str] | None
    type: str


def _node_arg(t: TensorInfo) -> NodeArg:
    elem = _ORT_TYPES.get(t.dtype, t.dtype)
    return NodeArg(t.name, None if t.shape is None else list(t.shape), f"tensor({elem})")


class InferenceSession:
    def __init__(self, path_or_model: Any, opt_level: int = 2, threads: int | None = None, *,
                 executor: str = "auto", memory_limit: int | None = None, memory_strategy: str | None = None,
                 verify_weights: bool = True, target: Target | str | None = None, wait_for_compile: bool = False,
                 on_status: Callable[[TierStatus], None] | None = None):
        """`memory_strategy` ("arena" or "counted", see kiln.build) builds the model with it; for a model
        built or saved already it must be the one it was built with (None: whichever that is).
        `verify_weights`: see `load`. `target`: what a model compiled here is built for (kiln.build's;
        "npu-sim" is the simulated accelerator, kiln.npu); None is this machine. `wait_for_compile`: compile
        before returning instead of running the generic tier meanwhile (see the module doc; a session given
        a `target` always compiles first); `on_status` hears each change of `status`."""
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise KilnError(f"threads must be a positive integer, got {threads!r}")
        self._tiers: Tiers | None = None
        self._model: Model | None = None
        if isinstance(path_or_model, Model):
            self._model = path_or_model
        elif isinstance(path_or_model, (str, os.PathLike)) and Path(path_or_model).is_dir():
            self._model = _load_model(path_or_model, verify_weights)
            self._model.memory_limit = memory_limit
        elif wait_for_compile or executor != "auto" or target is not None:
            from kiln.compiler import build  # the compiler is imported only when a session compiles

            self._model = build(path_or_model, target, opt_level=opt_level, executor=executor,
                                memory_limit=memory_limit, memory_strategy=memory_strategy or "arena")
        else:
            check_strategy(memory_strategy or "arena")
            self._tiers = _tiered(path_or_model, opt_level, memory_limit, memory_strategy or "arena", on_status)
        self.memory_limit = memory_limit
        if self._model is not None:
            _check_strategy(self._model, memory_strategy)
        target = self._model.target if self._model is not None else self._tiers.target
        self.threads = threads or default_threads(target)
        self.partition: Partition | None = None
        self._set_threads = None
        if target.threading == "kiln":
            self.partition = runtime().acquire(self.threads)
            weakref.finalize(self, runtime().release, self.partition)
        elif self.threads and self._model is not None:
            self._set_threads = openmp_env.set_num_threads(self._model.library)
        self._inputs, self._outputs = _described(self._model, self._tiers)
        self._output_names = [o.name for o in self._outputs]
        # a tiered session's own workers (its model may not be built yet); else the model's
        self._queue = RunQueue(host_cores()) if self._tiers is not None else None

    @property
    def model(self) -> Model:
        """The compiled model; a tiered session's waits for its build (and raises the build's error)."""
        if self._model is None:
            self._model = self._tiers.wait()
        return self._model

    @property
    def module(self) -> IRModule:
        """The graph the session's inputs and outputs are read from: a tiered session's imported one while its
        build runs (the generic tier is let go once the model runs), else the model's."""
        generic = self._tiers.generic if self._tiers is not None else None
        return generic.mod if generic is not None else self.model.mod

    @property
    def status(self) -> TierStatus:
        """Which tier runs go to and how far the specialized build is; a session given a compiled model is
        specialized from the start."""
        if self._tiers is not None:
            return self._tiers.status
        report = getattr(self._model, "report", None)  # a model loaded from a directory has none
        return TierStatus(SPECIALIZED, report.kernels, report.kernels) if report else TierStatus(SPECIALIZED, 0, None)

    def wait_for_compile(self, timeout: float | None = None) -> InferenceSession:
        """Block until the specialized build is done (its error raised); the session itself, for chaining."""
        if self._tiers is not None:
            self._tiers.wait(timeout)
        return self

    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(t) for t in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(t) for t in self._outputs]

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, Any], run_options: Any = None) -> list:
        """The outputs named (all, in model order, for None) computed from `feeds` (name -> array)."""
        names = self._output_names
        if output_names is not None:
            unknown = [n for n in output_names if n not in names]
            if unknown:
                raise InputError(f"unknown output name(s) {', '.join(unknown)}; the model's outputs are "
                                 f"{', '.join(names)}")
        if self._tiers is not None:
            outs = self._tiers.run(feeds, self._run_model, self._run_generic)
        else:
            outs = self._run_model(self._model, feeds)
        if output_names is None:
            return list(outs)
        return [outs[names.index(n)] for n in output_names]

    def _run_model(self, model: Model, feeds: dict[str, Any]) -> list:
        set_threads = self._set_threads
        if set_threads is None and self.threads and self.partition is None:  # a tiered session's, once built
            set_threads = self._set_threads = openmp_env.set_num_threads(model.library)
        if set_threads is not None:
            set_threads(ctypes.c_int(self.threads))
        with running(self.partition):
            return model.run(feeds)

    def _run_generic(self, generic: GenericExecutor, feeds: dict[str, Any]) -> list:
        if self.threads:
            openmp_env.set_num_threads(generic)(ctypes.c_int(self.threads))
        with sizes.memory_limit(self.memory_limit):
            return generic.run(feeds)

    def start(self, feeds: dict[str, Any]) -> PreemptibleRun:
        """A run of all outputs that another thread can cancel and that resumes where it stopped
        (kiln.runtime.run_handle), on this session's cores; an AOT model only."""
        return self.model.start(feeds, self.partition)

    def run_async(self, output_names: Sequence[str] | None, feeds: dict[str, Any], run_options: Any = None) -> Future:
        """`run` on a worker thread: a Future of its outputs (or of its error), returned at once."""
        queue = self._queue or self.model.queue
        return queue.submit(self.run, output_names, feeds, run_options)

    async def run_asyncio(self, output_names: Sequence[str] | None, feeds: dict[str, Any],
                          run_options: Any = None) -> list:
        """`run_async` awaited from asyncio: the event loop keeps running while the model does."""
        import asyncio  # only here: a process that never awaits a run need not import it
        return await asyncio.wrap_future(self.run_async(output_names, feeds, run_options))

    def export(self, directory: str | os.PathLike) -> Path:
        return self.model.export(directory)


def _tiered(model: Any, opt_level: int, memory_limit: int | None, memory_strategy: str,
            on_status: Callable[[TierStatus], None] | None) -> Tiers:
    """Import the ONNX model and run it on the generic tier, its specialized build started on a background
    thread. gcc builds the generic kernels (where the cache lacks them) while the importer loads: the
    longest steps before a first result overlap."""
    from kiln.codegen import generic_library
    from kiln.frontend.onnx import from_onnx  # the importer, only for a session that imports
    from kiln.runtime.generic_executor import GenericExecutor

    target = Target.host()
    generic_library.prefetch(target)
    with sizes.memory_limit(memory_limit):
        mod = from_onnx(model)
    generic = GenericExecutor(mod, target)  # waits for the prefetch's build: load holds its lock meanwhile

    def specialize(progress: Callable[[int, int], None]) -> Model:
        from kiln.compiler import build  # on the build thread: the first run need not wait for the import

        built = build(mod, opt_level=opt_level, memory_limit=memory_limit, memory_strategy=memory_strategy,
                      kernel_progress=progress)
        progress(built.report.kernels, built.report.kernels)
        if built.per_shape is not None:  # symbolic dims: new shapes build in the background too
            built.per_shape.background = True
        return built

    return Tiers(generic, specialize, on_status)


def _described(model: Model | None, tiers: Tiers | None) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """(inputs, outputs) of the model, or of the imported graph a tiered session runs first."""
    if model is not None:
        return model.inputs, model.outputs
    return tiers.inputs, tiers.outputs


def _check_strategy(model: Model, strategy: str | None) -> None:
    """KilnError when a session asks a built AOT model for a memory strategy it was not built with (a graph
    executor's per-shape builds take the strategy of the build)."""
    if strategy is None:
        return
    check_strategy(strategy)
    report = getattr(model.runner, "memory_report", None)
    built = report().strategy if report is not None else strategy
    if built != strategy:
        raise KilnError(f"memory strategy {strategy!r} was asked for, but the model was built with {built!r}; "
                        f"build it with kiln.build(..., memory_strategy={strategy!r})")


def default_threads(target: Target) -> int | None:
    """The threads a session runs when not told (see the module doc); None: OpenMP's default."""
    return target.cores if target.cores < host_cores() else None


def _load_model(directory: str | os.PathLike, verify_weights: bool = True) -> Model:
    from kiln.runtime.dataflow_executor import DataflowExecutor

    saved, aot, meta = artifact.load(directory, _compile_specialized, verify_weights)
    target = artifact.artifact_target(meta, directory)
    weights = meta.get("weights_bytes")
    if aot is not None:  # its graph (the kernel-by-kernel view export writes) is parsed when first read
        kind = "dataflow" if isinstance(aot, DataflowExecutor) else "aot"
        return Model(saved, kind, aot, meta.get("opt_level", 2), target=target, weights_bytes=weights)
    cm = saved.executor()
    return Model(cm.mod, "graph", cm, meta.get("opt_level", 2), target=target, weights_bytes=weights)


def _compile_specialized(*args: Any) -> Any:
    """The compiler's kiln.compiler.specialize.compile_specialized, imported on the first group a loaded
    model compiles at run time: most models never do, and importing the compiler costs most of a load."""
    from kiln.compiler.specialize import compile_specialized

    return compile_specialized(*args)


def load(directory: str | os.PathLike, threads: int | None = None, verify_weights: bool = True) -> InferenceSession:
    """A session over a model compiled and saved earlier; no compiler runs. Its weights are mapped from the
    directory's weights.bin, each checked against its crc32 first unless `verify_weights` is False (which
    saves a crc32 pass over the whole file at load: 0.08 s for 40 MB on a busy 2-core machine)."""
    if not Path(directory).is_dir():
        raise artifact.ArtifactError(f"{directory} is not a directory made by `kiln compile` or model.export")
    return InferenceSession(directory, threads=threads, verify_weights=verify_weights)

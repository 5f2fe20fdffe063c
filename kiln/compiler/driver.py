"""`kiln.build`: a model in, a CompiledModel out, with the fastest executor that can run it.

The pipeline: import (ONNX -> IRModule) -> optimize and fuse -> lower -> codegen -> link.
Static shapes and every fused group compilable: AOT (one C entry per inference). Otherwise the
kernel-by-kernel executor, which binds symbolic dims at run time and runs what cannot compile on
the host. Each stage is timed, and the build says whether gcc ran or the cache answered.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kiln.codegen.backends import build_library
from kiln.codegen.cache import CompileCache
from kiln.codegen.compiler import FLAGS
from kiln.compiler.aot import build_aot
from kiln.compiler.compiled_model import CompiledModel
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import lower_groups
from kiln.compiler.memory_order import DEFAULT_BUDGET_S
from kiln.compiler.model_dims import is_static, with_input_shapes
from kiln.compiler.report import BuildReport, CountingCache
from kiln.compiler.specialize import compile_specialized
from kiln.errors import AotError, KilnError
from kiln.ir import sizes
from kiln.ir.module import IRModule, param_bytes
from kiln.runtime import artifact
from kiln.runtime.aot_executor import check_strategy
from kiln.runtime.dataflow_executor import DataflowExecutor
from kiln.runtime.shape_specialized import ShapeSpecialized
from kiln.target import Target
from kiln.transform import PassContext, PassTiming
from kiln.tune.apply import Tuned

EXECUTORS = ("auto", "aot", "graph", "dataflow")
_DATAFLOW_MODE = {"auto": "auto", "aot": "never", "dataflow": "always"}  # build_aot's dataflow= per executor


@dataclass(frozen=True)
class _Memory:
    """How a build plans and bounds memory (see `build`)."""

    limit: int | None = None
    strategy: str = "arena"
    order_budget_s: float = DEFAULT_BUDGET_S
    kernel_progress: Callable[[int, int], None] | None = None  # not memory, but travels the same way


def build(model: Any, target: Target | str | None = None, opt_level: int = 2, *, executor: str = "auto",
          progress: Callable[[str], None] | None = None,
          records: str | os.PathLike | Mapping[str, Mapping[str, object]] | None = None,
          pass_config: Mapping[str, Any] | None = None, disabled_passes: Sequence[str] = (),
          required_passes: Sequence[str] = (), memory_limit: int | None = None, memory_strategy: str = "arena",
          memory_order_budget: float = DEFAULT_BUDGET_S,
          kernel_progress: Callable[[int, int], None] | None = None) -> CompiledModel:
    """Compile `model` (an IRModule, or an ONNX model / path / bytes) for `target`: a kiln.Target or its
    string (kiln.Target.parse: "c -cores=4"; options left out are the host's), by default this machine.

    executor: "auto" (AOT where it applies, else "graph"; with symbolic input dims, the graph executor
    plus an AOT build per input shapes, made on the first run at those shapes, see
    kiln.runtime.shape_specialized; a static model whose parallel branches pay for it runs on the dataflow
    executor, see kiln.compiler.dataflow_choice), "aot" (compiled sequential; fail if it does not apply),
    "dataflow" (independent kernels at the same time on parts of the cores, kiln.runtime.dataflow_executor;
    fail where AOT does not apply), or "graph" (kernel by kernel).
    `progress` receives one line per finished stage. `records`: a tuning records file (`kiln tune`),
    or workload key -> config; each group with a record for this target is scheduled with its
    fastest config. `pass_config`, `disabled_passes` and `required_passes` become the graph passes'
    PassContext (config, disabled, required); an unknown pass name or config key is a KilnError.
    `memory_limit` (bytes) bounds every tensor the build and the model's runs allocate and the AOT
    arena (default: the memory this machine has available); beyond it, MemoryLimitError.
    `memory_strategy` (AOT builds): "arena" (one arena with planned offsets, one C call per run) or
    "counted" (the kernels called one at a time over tensors a pool allocates at their first write and
    frees after their last read); with a memory limit, a build whose arena (arena) or order's peak of live
    bytes (counted) exceeds it fails before anything runs. `memory_order_budget`: seconds the search for
    the minimum-peak operator order may take (kiln.compiler.memory_order) before the best heuristic order wins.
    `kernel_progress(compiled, total)` hears of the kernels gcc has compiled (or the cache had) as they finish.
    The report's `profile` (kiln.codegen.build_profile) times every stage and translation unit."""
    if memory_limit is not None and (not isinstance(memory_limit, int) or memory_limit < 1):
        raise KilnError(f"memory_limit must be a positive number of bytes, got {memory_limit!r}")
    check_strategy(memory_strategy)
    if not isinstance(memory_order_budget, (int, float)) or memory_order_budget < 0:
        raise KilnError(f"memory_order_budget must be a non-negative number of seconds, got {memory_order_budget!r}")
    memory = _Memory(memory_limit, memory_strategy, float(memory_order_budget), kernel_progress)
    if Target.parse(target).kind == "npu-sim":
        from kiln.npu.build import build_npu  # the accelerator's compiler path, imported when asked for

        with sizes.memory_limit(memory_limit):
            return build_npu(model, Target.parse(target), opt_level, progress=progress)
    with sizes.memory_limit(memory_limit):
        compiled = _build(model, Target.parse(target), opt_level, executor, progress, records, pass_config,
                          disabled_passes, required_passes, memory)
    compiled.memory_limit = memory_limit
    compiled.report.add("memory", 0.0, str(compiled.footprint()), progress)
    return compiled


def _build(model: Any, target: Target, opt_level: int, executor: str, progress: Callable[[str], None] | None,
           records: Any, pass_config: Mapping[str, Any] | None, disabled_passes: Sequence[str],
           required_passes: Sequence[str], memory: _Memory) -> CompiledModel:
    if executor not in EXECUTORS:
        raise KilnError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    ctx = PassContext(opt_level, tuple(required_passes), tuple(disabled_passes), config=dict(pass_config or {}),
                      target=target)
    report = BuildReport()
    if not isinstance(model, IRModule):
        from kiln.frontend.onnx import from_onnx

        t0 = time.perf_counter()
        model = from_onnx(model)
        report.add("import", time.perf_counter() - t0, f"{len(model.input_names)} input(s)", progress)
        report.profile.add("import", time.perf_counter() - t0)
    report.weights_bytes = param_bytes(model)
    tuned = _load_records(records, target, report, progress) if records is not None else None
    static = is_static(model)
    if executor in ("aot", "dataflow") or (executor == "auto" and static):
        try:
            return _build_aot(model, ctx, report, progress, tuned, memory, _DATAFLOW_MODE[executor])
        except AotError as e:
            if executor != "auto":
                raise
            if progress is not None:
                progress(f"AOT does not apply ({e}); using the graph executor")
    compiled = _build_graph(model, ctx, report, progress, tuned, memory.kernel_progress)
    if executor == "auto" and not static:
        compiled.per_shape = ShapeSpecialized(model, compiled.runner, lambda shapes: build_aot(
            with_input_shapes(model, shapes), opt_level, memory_limit=memory.limit, ctx=ctx, cache=CompileCache(),
            tuned=tuned, cc=target.cc, target=target, memory_strategy=memory.strategy,
            order_budget_s=memory.order_budget_s))
        if progress is not None:
            progress("symbolic input dims: each new set of input shapes is built ahead of time on its first run")
    return compiled


def _load_records(records: Any, target: Target, report: BuildReport,
                  progress: Callable[[str], None] | None) -> Tuned:
    t0 = time.perf_counter()
    tuned = Tuned.load(records, target.key)
    where = f" from {records}" if isinstance(records, (str, os.PathLike)) else ""
    report.add("records", time.perf_counter() - t0, f"{len(tuned.configs)} tuned workload(s){where}", progress)
    return tuned


def _tuned_note(tuned: Tuned | None) -> str:
    return f" ({len(tuned.applied)} with tuned schedules)" if tuned is not None else ""


def _build_aot(mod: IRModule, ctx: PassContext, report: BuildReport,
               progress: Callable[[str], None] | None, tuned: Tuned | None = None,
               memory: _Memory | None = None, dataflow: str = "never") -> CompiledModel:
    memory = memory or _Memory()
    timing, cache = PassTiming(), CountingCache(report.profile, memory.kernel_progress)
    t0 = time.perf_counter()
    opt_level = ctx.opt_level
    aot = build_aot(mod, opt_level, memory_limit=memory.limit, ctx=replace(ctx, instruments=[timing]), cache=cache,
                    tuned=tuned, cc=ctx.target.cc, target=ctx.target, dataflow=dataflow,
                    memory_strategy=memory.strategy, order_budget_s=memory.order_budget_s, profile=report.profile)
    total = time.perf_counter() - t0
    passes = sum(t for _, t in timing.times)
    report.profile.add("passes", passes)
    kernels = len(aot.library.source.functions)
    report.add("passes", passes, f"{len(timing.times)} pass runs", progress)
    report.add("lower", total - passes - cache.seconds,
               f"{kernels} kernels{_tuned_note(tuned)}, memory plan: {aot.memory_report()}", progress)
    _compiled(report, cache, kernels, progress)
    kind = "dataflow" if isinstance(aot, DataflowExecutor) else "aot"
    if kind == "dataflow":
        report.add("schedule", 0.0, aot.schedule.note, progress)
    return CompiledModel(aot.mod, kind, aot, opt_level, target=ctx.target, report=report, tuned=tuned)


def _build_graph(mod: IRModule, ctx: PassContext, report: BuildReport, progress: Callable[[str], None] | None,
                 tuned: Tuned | None = None,
                 kernel_progress: Callable[[int, int], None] | None = None) -> CompiledModel:
    timing, cache = PassTiming(), CountingCache(report.profile, kernel_progress)
    t0 = time.perf_counter()
    opt_level = ctx.opt_level
    fused = fuse(mod, opt_level, replace(ctx, instruments=[timing]))
    report.add("passes", time.perf_counter() - t0, f"{len(timing.times)} pass runs", progress)
    report.profile.add("passes", time.perf_counter() - t0)
    t0 = time.perf_counter()
    with report.profile.stage("lower"):
        lowered, kernel_of, host = lower_groups(fused, tuned, target=ctx.target)
    report.add("lower", time.perf_counter() - t0,
               f"{len(lowered)} kernels{_tuned_note(tuned)}" + (f", {len(host)} group(s) on the host" if host else ""),
               progress)
    flags = ctx.target.compiler_flags(FLAGS)
    t0 = time.perf_counter()
    lib = build_library([k.func for k in lowered], "model", kind=ctx.target.kind, target=ctx.target,
                        cc=ctx.target.cc, flags=flags, cache=cache) if lowered else None
    report.profile.add("codegen", time.perf_counter() - t0 - cache.seconds)
    _compiled(report, cache, len(lowered), progress)
    cm = artifact.assemble(fused, kernel_of, host, lambda k: lib.get_function(k.func.name), lib, compile_specialized)
    return CompiledModel(fused, "graph", cm, opt_level, target=ctx.target, report=report, tuned=tuned)


def _compiled(report: BuildReport, cache: CountingCache, kernels: int, progress: Callable[[str], None] | None):
    report.kernels, report.compiled, report.cached = kernels, cache.misses, cache.hits
    report.profile.add("gcc_wall", cache.seconds)
    how = "from the compile cache" if cache.hits and not cache.misses else "compiled by gcc" if cache.misses else "-"
    report.add("compile", cache.seconds, f"{kernels} kernels in one library, {how}", progress)



"""`kiln.build`: a model in, a CompiledModel out, with the fastest executor that can run it.

Static shapes and every fused group compilable: AOT (one C entry per inference). Otherwise the
kernel-by-kernel executor, which binds symbolic dims at run time and runs what cannot compile on
the host. Each stage is timed, and the build says whether gcc ran or the cache answered.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kiln.codegen.cache import CompileCache, cache_key
from kiln.codegen.compiler import FLAGS, compiler_identity, find_compiler
from kiln.codegen.module import build as build_c
from kiln.errors import KilnError
from kiln.ir.module import IRModule
from kiln.ir.types import SizeVar, TensorType, TupleType
from kiln.runtime import artifact
from kiln.runtime.aot import AotError, AotModule, build_aot
from kiln.runtime.executor import CompiledModule, fuse, lower_groups
from kiln.runtime.shape_specialized import ShapeSpecialized
from kiln.target import Target
from kiln.transform import PassContext, PassTiming
from kiln.tune.apply import Tuned

EXECUTORS = ("auto", "aot", "graph")


@dataclass
class BuildReport:
    """What a build did: (stage, seconds, detail) in order, and how the library was obtained."""

    stages: list[tuple[str, float, str]] = field(default_factory=list)
    kernels: int = 0
    compiled: int = 0  # libraries gcc built
    cached: int = 0  # libraries the compile cache already had

    def add(self, stage: str, seconds: float, detail: str, progress: Callable[[str], None] | None) -> None:
        self.stages.append((stage, seconds, detail))
        if progress is not None:
            progress(f"{stage:8s} {seconds * 1e3:9.1f} ms  {detail}")


class _CountingCache(CompileCache):
    """The compile cache, noting for the report whether each library was a hit and how long gcc took."""

    def __init__(self):
        super().__init__()
        self.hits, self.misses, self.seconds = 0, 0, 0.0

    def build(self, source: str, cc: str = "gcc", flags: tuple[str, ...] = FLAGS) -> Path:
        _, lib = self.paths(cache_key(source, flags, compiler_identity(find_compiler(cc))))
        hit = lib.exists()
        t0 = time.perf_counter()
        path = super().build(source, cc, flags)
        self.seconds += time.perf_counter() - t0
        self.hits, self.misses = self.hits + hit, self.misses + (not hit)
        return path


@dataclass
class TensorInfo:
    """A model input or output: dims are ints or symbolic names."""

    name: str
    shape: tuple[int | str, ...] | None
    dtype: str


@dataclass
class CompiledModel:
    mod: IRModule  # optimized and fused
    executor: str  # "aot" or "graph"
    runner: AotModule | CompiledModule
    opt_level: int
    report: BuildReport = field(default_factory=BuildReport)
    tuned: Tuned | None = None  # the tuning records' configs the kernels were scheduled with
    per_shape: ShapeSpecialized | None = None  # static builds per input shapes, the graph runner behind them
    target: Target = field(default_factory=Target.host)  # the machine the kernels were built for

    def run(self, feeds: dict[str, Any]) -> list[Any]:
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
        aot = self.runner if isinstance(self.runner, AotModule) else None
        return artifact.export(directory, self._graph_state(), info, aot)

    def _graph_state(self) -> CompiledModule:
        """The kernel-by-kernel view of the same library (the AOT library exports every kernel too)."""
        if isinstance(self.runner, CompiledModule):
            return self.runner
        _, kernel_of, host = lower_groups(self.mod, self.tuned, target=self.target)
        lib = self.runner.library
        return artifact.assemble(self.mod, kernel_of, host, lambda k: lib.get_function(k.func.name), lib)


def _info(name: str, t: Any) -> TensorInfo:
    if not isinstance(t, TensorType) or t.shape is None:
        return TensorInfo(name, None, str(t))
    return TensorInfo(name, tuple(d.name if isinstance(d, SizeVar) else d if isinstance(d, int) else "?"
                                  for d in t.shape), t.dtype)


def is_static(mod: IRModule) -> bool:
    return all(isinstance(p.type, TensorType) and p.type.shape is not None
               and all(isinstance(d, int) for d in p.type.shape) for p in mod.main.params)


def build(model: Any, target: Target | str | None = None, opt_level: int = 2, *, executor: str = "auto",
          progress: Callable[[str], None] | None = None,
          records: str | os.PathLike | Mapping[str, Mapping[str, object]] | None = None) -> CompiledModel:
    """Compile `model` (an IRModule, or an ONNX model / path / bytes) for `target`: a kiln.Target or its
    string (kiln.Target.parse: "c -cores=4"; options left out are the host's), by default this machine.

    executor: "auto" (AOT where it applies, else "graph"; with symbolic input dims, the graph executor
    plus an AOT build per input shapes, made on the first run at those shapes, see
    kiln.runtime.shape_specialized), "aot" (fail if it does not apply), or "graph" (kernel by kernel).
    `progress` receives one line per finished stage. `records`: a tuning records file (`kiln tune`),
    or workload key -> config; each group with a record for this target is scheduled with its
    fastest config."""
    target = Target.parse(target)
    if executor not in EXECUTORS:
        raise KilnError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    report = BuildReport()
    if not isinstance(model, IRModule):
        from kiln.frontend.onnx import from_onnx

        t0 = time.perf_counter()
        model = from_onnx(model)
        report.add("import", time.perf_counter() - t0, f"{len(model.input_names)} input(s)", progress)
    tuned = _load_records(records, target, report, progress) if records is not None else None
    static = is_static(model)
    if executor == "aot" or (executor == "auto" and static):
        try:
            return _build_aot(model, opt_level, report, progress, tuned, target)
        except AotError as e:
            if executor == "aot":
                raise
            if progress is not None:
                progress(f"AOT does not apply ({e}); using the graph executor")
    compiled = _build_graph(model, opt_level, report, progress, tuned, target)
    if executor == "auto" and not static:
        compiled.per_shape = ShapeSpecialized(model, compiled.runner,
                                              lambda m: build_aot(m, opt_level, cache=CompileCache(), tuned=tuned,
                                                                    cc=target.cc, target=target))
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


def _build_aot(mod: IRModule, opt_level: int, report: BuildReport,
               progress: Callable[[str], None] | None, tuned: Tuned | None = None,
               target: Target | None = None) -> CompiledModel:
    target = target or Target.host()
    timing, cache = PassTiming(), _CountingCache()
    t0 = time.perf_counter()
    aot = build_aot(mod, opt_level, ctx=PassContext(opt_level, instruments=[timing], target=target), cache=cache,
                    tuned=tuned, cc=target.cc, target=target)
    total = time.perf_counter() - t0
    passes = sum(t for _, t in timing.times)
    kernels = len(aot.library.source.functions)
    report.add("passes", passes, f"{len(timing.times)} pass runs", progress)
    report.add("lower", total - passes - cache.seconds,
               f"{kernels} kernels{_tuned_note(tuned)}, memory plan: {aot.memory_report()}", progress)
    _compiled(report, cache, kernels, progress)
    return CompiledModel(aot.mod, "aot", aot, opt_level, report, tuned, target=target)


def _build_graph(mod: IRModule, opt_level: int, report: BuildReport,
                 progress: Callable[[str], None] | None, tuned: Tuned | None = None,
                 target: Target | None = None) -> CompiledModel:
    target = target or Target.host()
    timing, cache = PassTiming(), _CountingCache()
    t0 = time.perf_counter()
    fused = fuse(mod, opt_level, PassContext(opt_level, instruments=[timing], target=target))
    report.add("passes", time.perf_counter() - t0, f"{len(timing.times)} pass runs", progress)
    t0 = time.perf_counter()
    lowered, kernel_of, host = lower_groups(fused, tuned, target=target)
    report.add("lower", time.perf_counter() - t0,
               f"{len(lowered)} kernels{_tuned_note(tuned)}" + (f", {len(host)} group(s) on the host" if host else ""),
               progress)
    flags = target.compiler_flags(FLAGS)
    lib = build_c([k.func for k in lowered], "model", cc=target.cc, flags=flags, cache=cache) if lowered else None
    _compiled(report, cache, len(lowered), progress)
    cm = artifact.assemble(fused, kernel_of, host, lambda k: lib.get_function(k.func.name), lib)
    return CompiledModel(fused, "graph", cm, opt_level, report, tuned, target=target)


def _compiled(report: BuildReport, cache: _CountingCache, kernels: int, progress: Callable[[str], None] | None):
    report.kernels, report.compiled, report.cached = kernels, cache.misses, cache.hits
    how = "from the compile cache" if cache.hits and not cache.misses else "compiled by gcc" if cache.misses else "-"
    report.add("compile", cache.seconds, f"{kernels} kernels in one library, {how}", progress)


def fix_dims(model: Any, dims: dict[str, int]) -> Any:
    """A copy of the ONNX model whose symbolic input/output dims named in `dims` are fixed sizes."""
    import onnx

    from kiln.frontend.onnx import load_model

    m = onnx.ModelProto()
    m.CopyFrom(load_model(model))
    used = set()
    for vi in [*m.graph.input, *m.graph.output]:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                used.add(d.dim_param)
                d.dim_value = dims[d.dim_param]
    unknown = sorted(set(dims) - used)
    if unknown:
        raise KilnError(f"the model has no symbolic dim named {', '.join(unknown)}")
    return m


def flop_count(mod: IRModule) -> int:
    """FLOPs of one run counted from conv, matmul and gemm, also in their blocked and packed forms (2 per
    multiply-add); needs static shapes."""
    from kiln.ir.expr import Call, Op
    from kiln.ir.visitor import post_order

    total = 0
    for fn in mod.functions.values():
        for e in post_order(fn):
            if not (isinstance(e, Call) and isinstance(e.op, Op)) or e.op.name not in _MACS:
                continue
            shapes = [a.type.shape if isinstance(a.type, TensorType) else None for a in e.args[:2]]
            out = e.type.shape if isinstance(e.type, TensorType) else None
            if out is None or None in shapes or not all(isinstance(d, int) for s in (*shapes, out) for d in s):
                continue
            total += 2 * int(np.prod(out, dtype=np.int64)) * _MACS[e.op.name](e, *shapes)
    return total


_MACS: dict[str, Callable[..., int]] = {  # multiply-adds per output element
    "nn.conv": lambda e, x, w: int(np.prod(w[1:], dtype=np.int64)),
    "linalg.mat_mul": lambda e, a, b: a[-1],
    "linalg.gemm": lambda e, a, b: a[0] if e.attrs.transA else a[1],
    # the optimized graph's forms: a blocked conv's W is [O/o, I/i, KH, KW, i, o], a packed dense's A is [..., K]
    "nn.conv2d_nchwc": lambda e, x, w: int(np.prod(w, dtype=np.int64)) // (w[0] * w[-1]),
    "linalg.dense_packed": lambda e, a, w: a[-1],
}

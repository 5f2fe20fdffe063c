"""AOT planning: a static-shape model compiled into one C entry function (kiln.runtime.aot_executor runs it).

`build_aot` fuses and lowers the model like the graph executor's build (kiln.compiler.lower), flattens
`main` into a list of kernel calls over tensors, plans their memory (kiln.compiler.memory_plan) and
generates `kiln_model_run` (kiln.codegen.aot_source) into the same library as the kernels: one ctypes
call per inference, no Python between kernels. Models that need the host (a group without a compute,
dynamic shapes, control flow) are refused: the graph executor runs those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.codegen import CompileCache
from kiln.codegen.aot_source import Copy, KernelCall, Ptr
from kiln.codegen.backends import get_backend
from kiln.codegen.build_profile import BuildProfile
from kiln.codegen.compiler import FLAGS
from kiln.codegen.lower_fused import Kernel
from kiln.compiler.dataflow_plan import plan_dataflow
from kiln.compiler.fuse import fuse
from kiln.compiler.kernel_cache import KernelCache
from kiln.compiler.lower import lower_groups
from kiln.compiler.memory_order import DEFAULT_BUDGET_S
from kiln.compiler.memory_plan import MemoryPlan, Step, plan_memory
from kiln.errors import AotError
from kiln.ir.dtype import from_numpy, to_numpy
from kiln.ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, children
from kiln.ir.module import IRModule
from kiln.ir.sizes import check_alloc, check_bytes, tensor_bytes
from kiln.ir.types import TensorType, TupleType, Type
from kiln.ir.visitor import post_order
from kiln.runtime.aot_executor import AotExecutor, MemoryReport, check_strategy
from kiln.runtime.counted_executor import CountedExecutor, CountedProgram, CountedStep, Slot
from kiln.runtime.dataflow_executor import DataflowExecutor
from kiln.runtime.executor import describe_group
from kiln.target import Target
from kiln.tir.stmt import Buffer
from kiln.transform import PassContext
from kiln.tune.apply import Tuned

_HINT = '; build it for the graph executor instead (kiln.build(..., executor="graph"))'


@dataclass
class _Graph:
    """`main` as kernel calls over numbered tensors."""

    types: list[TensorType] = field(default_factory=list)  # by tensor id
    names: list[str] = field(default_factory=list)  # by tensor id: what it is, for errors
    homes: dict[int, Ptr] = field(default_factory=dict)  # inputs and weights (fixed pointers)
    weights: list[np.ndarray] = field(default_factory=list)
    weight_ids: dict[int, int] = field(default_factory=dict)  # id(array) -> tensor id
    calls: list[tuple[Kernel, tuple[int, ...]]] = field(default_factory=list)  # tensor per PrimFunc param
    steps: list[Step] = field(default_factory=list)
    groups: list[Function] = field(default_factory=list)  # the fused group of each step

    def tensor(self, t: Type, what: str) -> int:
        self.types.append(_static(t, what))
        self.names.append(what)
        return len(self.types) - 1

    def weight(self, data: np.ndarray, t: Type) -> int:
        if id(data) not in self.weight_ids:
            tid = self.tensor(t, "a constant")
            self.homes[tid] = Ptr("weight", len(self.weights))
            if not data.flags.c_contiguous:  # a folded splat (a broadcast view) becomes a whole weight here
                check_alloc("a constant", data.shape, data.dtype)
            self.weights.append(np.ascontiguousarray(data))
            self.weight_ids[id(data)] = tid
        return self.weight_ids[id(data)]

    def nbytes(self, tid: int) -> int:
        t = self.types[tid]
        return tensor_bytes(t.shape, t.dtype, self.names[tid])


def _static(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType) or t.shape is None:
        raise AotError(f"{what} has type {t}; AOT runs only tensors{_HINT}")
    if not all(isinstance(d, int) for d in t.shape):
        raise AotError(f"{what} has a dynamic shape {t}; AOT needs static shapes{_HINT}")
    return t


def _outer(e: Expr) -> tuple[Expr, ...]:
    return () if isinstance(e, Function) else children(e)


def _flatten(main: Function, kernels: dict[int, Kernel]) -> tuple[_Graph, list[int]]:
    """The kernel calls of `main` in a valid order, and the tensor of each model output."""
    g = _Graph()
    value: dict[int, Any] = {}
    for i, p in enumerate(main.params):
        value[id(p)] = g.tensor(p.type, f"input '{p.name}'")
        g.homes[value[id(p)]] = Ptr("input", i)
    for e in post_order(main.body, _outer):
        if id(e) in value:
            continue
        if isinstance(e, Constant):
            value[id(e)] = g.weight(e.data, e.type)
        elif isinstance(e, Call) and isinstance(e.op, Function) and e.op.attr("Primitive"):
            value[id(e)] = _call(g, e, kernels, value)
        elif isinstance(e, TupleGetItem):
            value[id(e)] = value[id(e.tuple_value)][e.index]
        elif isinstance(e, Tuple):
            value[id(e)] = tuple(value[id(f)] for f in e.fields)
        elif isinstance(e, Function) and e.attr("Primitive"):
            continue
        else:
            what = e.op.name if isinstance(e, Call) and hasattr(e.op, "name") else type(e).__name__
            raise AotError(f"main contains {what} outside a fused kernel (control flow or a host "
                           f"value){_HINT}")
    result = value[id(main.body)]
    outputs = list(result) if isinstance(main.body.type, TupleType) else [result]
    for k, o in enumerate(outputs):
        if not isinstance(o, int):
            raise AotError(f"output {k} is a nested tuple; AOT returns a flat list of tensors{_HINT}")
    return g, outputs


def _call(g: _Graph, e: Call, kernels: dict[int, Kernel], value: dict[int, Any]) -> Any:
    k = kernels[id(e.op)]
    args = tuple(value[id(a)] for a in e.args)
    if not all(isinstance(a, int) for a in args):
        raise AotError(f"{k.func.name}: a tuple argument to a fused call{_HINT}")
    consts = tuple(g.weight(c, TensorType(c.shape, from_numpy(c.dtype))) for c in k.constants)
    outs = tuple(g.tensor(t, f"output of {k.func.name} ({describe_group(e.op)})") for t in k.output_types)
    tids = args + consts + outs
    params = k.func.params
    if len(params) != len(tids) or not all(isinstance(p, Buffer) for p in params):
        raise AotError(f"{k.func.name}: its kernel takes size parameters; AOT needs static shapes{_HINT}")
    for p, tid in zip(params, tids):
        if to_numpy(p.dtype) != to_numpy(g.types[tid].dtype):
            raise AotError(f"{k.func.name}: buffer {p.name} is {p.dtype} but its tensor is {g.types[tid].dtype}")
    g.calls.append((k, tids))
    g.steps.append(Step(k.func.name, args + consts, outs))
    g.groups.append(e.op)
    return outs if isinstance(e.op.body.type, TupleType) else outs[0]


def build_aot(mod: IRModule, opt_level: int = 2, *, memory_limit: int | None = None,
              ctx: PassContext | None = None, cache: CompileCache | None = None, cc: str = "gcc",
              flags: tuple[str, ...] = FLAGS, tuned: Tuned | None = None, target: Target | None = None,
              dataflow: str = "never", memory_strategy: str = "arena",
              order_budget_s: float = DEFAULT_BUDGET_S, profile: BuildProfile | None = None) -> AotExecutor:
    """Compile `mod` (static shapes, every group compilable) into one entry function.
    `dataflow`: "auto" lets the cost model (kiln.compiler.dataflow_choice) pick the dataflow executor
    for models whose branches pay for it, "always" picks it, "never" builds the sequential entry only.
    `tuned`: tuning records' configs to schedule the groups with; `target`: the machine to build for (default:
    `ctx`'s, else the host; `flags` are then mapped to it); its kind picks the code-generation backend.

    `memory_strategy`: "arena" (one planned arena, one C call per run) or "counted" (the kernels called one
    by one over pool-allocated tensors, kiln.runtime.counted_executor); `order_budget_s` bounds the search
    for the minimum-peak order (kiln.compiler.memory_order). `memory_limit` (bytes) bounds the arena
    (arena) or the order's peak (counted): a larger plan raises MemoryLimitError before anything is
    compiled or run. `profile` receives the seconds of lowering, planning and C generation."""
    profile = profile or BuildProfile()
    check_strategy(memory_strategy)
    for p in mod.main.params:
        _static(p.type, f"input '{p.name}'")
    ctx = ctx or PassContext(opt_level, target=target or Target.host())
    target = target or ctx.target
    fused = fuse(mod, opt_level, ctx)
    # NOTE: a caller's own compile-cache directory holds the lowered groups too
    with profile.stage("lower"):
        lowered, kernels, host = lower_groups(fused, tuned, KernelCache(cache.root / "kernels") if cache else None,
                                              target)
    if host:
        raise AotError(f"{len(host)} fused group(s) cannot be compiled: {'; '.join(host)}{_HINT}")
    with profile.stage("plan"):
        graph, outputs, plan, flow = _plan(fused, kernels, target, dataflow, memory_limit, memory_strategy,
                                           order_budget_s)
    where = dict(graph.homes)
    where.update({t: Ptr("arena", o) for t, o in plan.offsets.items()})
    copies = []
    for k, t in enumerate(outputs):
        if t in where:
            copies.append(Copy(Ptr("output", k), where[t], graph.nbytes(t)))
        else:
            where[t] = Ptr("output", k)
    calls = [KernelCall(graph.calls[i][0].func.name, tuple(where[t] for t in graph.calls[i][1]))
             for i in plan.order]
    backend = get_backend(target.kind)
    with profile.stage("codegen"):
        source = (backend.render_dataflow if flow else backend.render_aot)([k.func for k in lowered], calls, copies,
                                                                           target)
    path = backend.compile(source.code, cache=cache, cc=cc, flags=target.compiler_flags(flags))
    return _executor(fused, graph, plan, flow, outputs, backend.load("model", source, path), memory_strategy)


def _plan(fused: IRModule, kernels: dict, target: Target, dataflow: str, memory_limit: int | None,
          memory_strategy: str, order_budget_s: float) -> tuple[_Graph, list[int], MemoryPlan, Any]:
    """The flattened calls, the outputs, the memory plan and the dataflow plan (None: sequential)."""
    graph, outputs = _flatten(fused.main, kernels)
    sizes = {t: graph.nbytes(t) for _, tids in graph.calls for t in tids
             if t not in graph.homes and t not in outputs}
    plan = plan_memory(graph.steps, sizes, memory_limit, budget_s=order_budget_s, strategy=memory_strategy)
    flow = None
    if memory_strategy == "arena":
        flow = plan_dataflow(graph.steps, graph.groups, graph.nbytes, plan, target, dataflow, memory_limit)
        plan = flow.memory if flow is not None else plan
        check_bytes("the arena of intermediate tensors", plan.arena_bytes)
    else:
        check_bytes("the live intermediate tensors at the peak of the planned order", plan.lower_bound)
    for t in outputs:  # before gcc runs (the executor checks them again, for a model loaded from disk)
        check_alloc(graph.names[t], graph.types[t].shape, graph.types[t].dtype)
    return graph, outputs, plan, flow


def _executor(fused: IRModule, graph: _Graph, plan: MemoryPlan, flow: Any, outputs: list[int], library: Any,
              memory_strategy: str) -> AotExecutor:
    """The executor of the compiled library: dataflow, counted or arena."""
    report = _report(graph, plan, outputs, memory_strategy)
    out_layout = [(tuple(graph.types[t].shape), to_numpy(graph.types[t].dtype)) for t in outputs]
    calls = tuple(describe_group(graph.groups[i]) for i in plan.order)
    if flow is not None:
        return DataflowExecutor(fused, graph.weights, out_layout, plan.arena_bytes, library, report, calls,
                                flow.schedule)
    if memory_strategy == "counted":
        return CountedExecutor(fused, graph.weights, out_layout, library, report, calls,
                               _counted_program(graph, plan, outputs), library.get_function)
    return AotExecutor(fused, graph.weights, out_layout, plan.arena_bytes, library, report, calls)


def _report(graph: _Graph, plan: MemoryPlan, outputs: list[int], strategy: str) -> MemoryReport:
    search = plan.search
    return MemoryReport(plan.arena_bytes, plan.lower_bound, plan.naive_bytes,
                        tuple(graph.steps[i].name for i in plan.order), sum(w.nbytes for w in graph.weights),
                        sum(graph.nbytes(t) for t in outputs), strategy, search.topological_peak, search.peak,
                        search.exact, search.seconds)


def _counted_program(graph: _Graph, plan: MemoryPlan, outputs: list[int]) -> CountedProgram:
    """The planned order as kernel calls over slots: a pool tensor is allocated by the step that writes it
    and freed by the step that reads it last (the plan's lifetimes)."""
    slot = {t: Slot(p.kind, p.index) for t, p in graph.homes.items()}
    slot.update({t: Slot("pool", t) for t in plan.lifetimes})
    copies = []
    for k, t in enumerate(outputs):
        if t in slot:
            copies.append((k, slot[t]))
        else:
            slot[t] = Slot("output", k)
    frees: dict[int, list[int]] = {}
    for t, (_, last) in plan.lifetimes.items():
        frees.setdefault(last, []).append(t)
    steps = []
    for pos, i in enumerate(plan.order):
        kernel, tids = graph.calls[i]
        allocs = tuple(t for t in graph.steps[i].outputs if t in plan.lifetimes)
        steps.append(CountedStep(kernel.func.name, tuple(slot[t] for t in tids), allocs, tuple(frees.get(pos, ()))))
    tensors = {t: (tuple(graph.types[t].shape), to_numpy(graph.types[t].dtype).str) for t in plan.lifetimes}
    return CountedProgram(tuple(steps), tensors, tuple(copies))

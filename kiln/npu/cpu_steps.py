"""The CPU steps of a model placed on the accelerator, compiled by Kiln's CPU backend into one library.

Consecutive CPU steps (no accelerator step between them) form a region. Each region becomes some fields
of one module's tuple result, every value it reads from outside a fresh parameter, so fusion never joins
two regions and a region can run as soon as the values it reads exist. The module is built for the host
with the graph executor, and a run evaluates one region's fields at a time (GraphExecutor.run_fields). A
group the CPU backend cannot compile runs on the operators' references there; `on_host` says which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kiln.ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var, children
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order
from kiln.npu.placement import Step
from kiln.runtime.executor import GraphExecutor


@dataclass
class CpuRegion:
    """Consecutive CPU steps: `inputs` (the CPU module's parameter, the model value it stands for) and
    `outputs` (a field of the module's result, the model call it holds)."""

    steps: list[Step]
    inputs: list[tuple[Var, Expr]] = field(default_factory=list)
    outputs: list[tuple[int, Call]] = field(default_factory=list)


class CpuSteps:
    """The regions of a placed model and the graph executor of the one library that runs them."""

    def __init__(self, regions: list[CpuRegion], executor: GraphExecutor):
        self.regions, self.executor = regions, executor
        self.first = {id(r.steps[0]): r for r in regions}
        self.member = {id(s) for r in regions for s in r.steps}

    @classmethod
    def build(cls, fn: Function, steps: list[Step], compile_module: Callable[[IRModule], Any]) -> CpuSteps | None:
        """The CPU steps of `steps` compiled by `compile_module` (kiln.build for the host, graph executor);
        None when every step runs on the accelerator."""
        regions = _regions(steps)
        if not regions:
            return None
        outside = _read_outside(fn, regions)
        params: list[Var] = []
        results: list[Expr] = []
        for k, region in enumerate(regions):
            body = _copy_region(region, k, outside)
            params += [v for v, _ in region.inputs]
            region.outputs = [(len(results) + i, call) for i, (call, _) in enumerate(body)]
            results += [e for _, e in body]
        mod = IRModule({"main": Function(tuple(params), Tuple(tuple(results)))})
        return cls(regions, compile_module(mod).runner)

    def run(self, region: CpuRegion, value_of: Callable[[Expr], Any]) -> list[tuple[Call, Any]]:
        """The values of `region`'s outputs, reading its inputs through `value_of` (host values)."""
        values = {v.name: value_of(e) for v, e in region.inputs}
        got = self.executor.run_fields([i for i, _ in region.outputs], values)
        return [(call, v) for (_, call), v in zip(region.outputs, got)]

    @property
    def on_host(self) -> list[str]:
        """The groups that ran on the operators' references (the CPU backend built no kernel for them)."""
        return list(self.executor.host_groups) + list(self.executor.ran_on_host.values())


def _regions(steps: list[Step]) -> list[CpuRegion]:
    out: list[CpuRegion] = []
    previous_cpu = False
    for s in steps:
        if s.device == "cpu":
            if previous_cpu:
                out[-1].steps.append(s)
            else:
                out.append(CpuRegion([s]))
        previous_cpu = s.device == "cpu"
    return out


def _read_outside(fn: Function, regions: list[CpuRegion]) -> set[int]:
    """The calls of the regions that something outside their own region reads (or the model returns)."""
    region_of = {id(s.anchor): k for k, r in enumerate(regions) for s in r.steps}
    out = {id(fn.body)} | {id(f) for f in (fn.body.fields if isinstance(fn.body, Tuple) else ())}
    for e in post_order(fn.body):
        mine = region_of.get(id(e)) if isinstance(e, Call) else None
        for a in children(e):
            if mine is None or region_of.get(id(a), mine) != mine:
                out.add(id(a))
    return out


def _copy_region(region: CpuRegion, k: int, outside: set[int]) -> list[tuple[Call, Expr]]:
    """The region's calls rebuilt over parameters for what they read from outside it (added to
    `region.inputs`); the pairs (model call, its copy) that are read outside."""
    calls = {id(s.anchor) for s in region.steps}
    copies: dict[int, Expr] = {}

    def copy(e: Expr) -> Expr:
        if id(e) in copies:
            return copies[id(e)]
        if isinstance(e, Constant) or (isinstance(e, tuple) and not e):
            out: Any = e
        elif isinstance(e, Call) and id(e) in calls:
            out = Call(e.op, tuple(copy(a) for a in e.args), e.attrs, e.name)
        elif isinstance(e, Tuple):
            out = Tuple(tuple(copy(f) for f in e.fields))
        elif isinstance(e, TupleGetItem) and id(e.tuple_value) in calls:
            out = TupleGetItem(copy(e.tuple_value), e.index)
        else:
            out = Var(f"cpu{k}_in{len(region.inputs)}", e.type)
            region.inputs.append((out, e))
        copies[id(e)] = out
        return out

    return [(s.anchor, copy(s.anchor)) for s in region.steps if id(s.anchor) in outside]

"""A model cut into pipeline stages: each stage's own IRModule, what it reads, makes and forwards, and the report.

Values travel between stages as one dict by name. Stage i reads its inputs from that dict, runs its
module, and hands on its results together with the values it received that a later stage (or the
model's outputs) still needs (`forward`), so each stage takes only the previous stage's result and
the driver never joins two results. Running the stages in order in one process
(`run_stages`) is the pipeline's definition; the Ray paths must give what it gives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.distributed.stage_cost import CostModel, type_bytes
from kiln.distributed.stage_cut import StageSpan, choose_cuts, spans_at
from kiln.distributed.stage_graph import INPUT_POS, StageGraph, stage_graph
from kiln.distributed.stage_worker import stage_step
from kiln.errors import DistributedError, KilnError
from kiln.ir.expr import Expr, Function, Tuple, Var, children
from kiln.ir.module import IRModule
from kiln.ir.types import type_str
from kiln.ir.visitor import with_children


@dataclass(frozen=True)
class Stage:
    """Stage `index`: its module (inputs and outputs named as the values they are), and the names it forwards."""

    index: int
    module: IRModule
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    forward: tuple[str, ...]
    span: StageSpan


@dataclass(frozen=True)
class PipelinePlan:
    """The stages in order; `outputs` maps each model output to the value that carries it; `cuts[i]`
    describes the values crossing after stage i (name, source node, type, bytes)."""

    stages: tuple[Stage, ...]
    inputs: tuple[str, ...]
    outputs: tuple[tuple[str, str], ...]
    cuts: tuple[tuple[tuple[str, str, str, int], ...], ...]
    cost: CostModel

    def report(self) -> str:
        """The cut tensors, and each stage's operators, modelled time and bytes handed on."""
        lines = [f"pipeline of {len(self.stages)} stage(s), cost model at {self.cost.threads} thread(s) a stage, "
                 f"{self.cost.transfer_rate / 1e9:g} GB/s and {self.cost.hop_s * 1e3:g} ms a hop"]
        for stage in self.stages:
            s = stage.span
            lines.append(f"stage {stage.index}: operators {s.start}..{s.stop - 1}, compute {s.seconds * 1e3:.3f} ms, "
                         f"hands on {s.out_bytes} B ({s.transfer_seconds * 1e3:.3f} ms)")
            if stage.index < len(self.cuts):
                for name, source, typ, nbytes in self.cuts[stage.index]:
                    lines.append(f"  cut {name} <- {source}: {typ}, {nbytes} B")
        bottleneck = max(st.span.total_seconds for st in self.stages)
        lines.append(f"bottleneck {bottleneck * 1e3:.3f} ms a request (modelled)")
        return "\n".join(lines)


def plan_pipeline(model: Any, stages: int, cost: CostModel | None = None,
                  cuts: Sequence[int] | None = None) -> PipelinePlan:
    """Cut `model` (an IRModule, or an ONNX model / path / bytes) into `stages` stages by the cost model, or
    at `cuts` (the operator positions stages 1.. start at, in the order the report numbers them)."""
    cost = cost or CostModel()
    if not isinstance(model, IRModule):
        from kiln.frontend.onnx import from_onnx

        model = from_onnx(model)
    g = stage_graph(model)
    if cuts is not None and len(cuts) != stages - 1:
        raise KilnError(f"{stages} stages need {stages - 1} cut(s), got {list(cuts)}")
    spans = choose_cuts(g, stages, cost) if cuts is None else spans_at(g, list(cuts), cost)
    built = tuple(_stage(g, i, span, span.stop == len(g.nodes)) for i, span in enumerate(spans))
    crossing = tuple(_describe_cut(g, span.stop) for span in spans[:-1])
    outputs = tuple((n, g.value_name(e)) for n, e in g.outputs)
    return PipelinePlan(built, model.input_names, outputs, crossing, cost)


def run_stages(plan: PipelinePlan, models: Sequence[Any], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every model output, by running the compiled stages (`models[i]` of `plan.stages[i]`) one after another."""
    values: dict[str, np.ndarray] = dict(feeds)
    for stage, model in zip(plan.stages, models, strict=True):
        values = stage_step(stage.index, stage.inputs, stage.forward, _named(stage, model), values)
    return {name: values[value] for name, value in plan.outputs}


def _named(stage: Stage, model: Any) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    return lambda feeds: dict(zip(stage.outputs, model.run(feeds), strict=True))


def compile_stages(plan: PipelinePlan, **build_options: Any) -> list[Any]:
    """Each stage built by kiln.build; one DistributedError naming the stage that failed."""
    from kiln.compiler.driver import build

    models = []
    for stage in plan.stages:
        try:
            models.append(build(stage.module, **build_options))
        except Exception as e:
            raise DistributedError(f"stage {stage.index} of {len(plan.stages)} ({', '.join(stage.inputs)} -> "
                                   f"{', '.join(stage.outputs)}) failed to compile: {e}") from e
    return models


def _stage(g: StageGraph, index: int, span: StageSpan, last: bool) -> Stage:
    """The module of nodes [start, stop): earlier values become its parameters, the values read after it its results."""
    a, b = span.start, span.stop
    made_before = [*g.inputs, *g.nodes[:a]]
    read_here = {id(c) for e in g.nodes[a:b] for c in children(e)}
    params = {id(e): Var(g.value_name(e), e.type) for e in made_before if id(e) in read_here}
    memo: dict[int, Expr] = {}
    for e in g.nodes[a:b]:
        memo[id(e)] = with_children(e, tuple(memo.get(id(c)) or params.get(id(c)) or c for c in children(e)))
    results = [e for e in g.nodes[a:b] if g.last_use[id(e)] >= b]
    if last:
        results += [e for _, e in g.outputs if id(e) not in g.pos and not isinstance(e, Var)]  # constant outputs
    forward = [g.value_name(e) for e in made_before if g.last_use.get(id(e), INPUT_POS) >= b]
    outs = [memo.get(id(e), e) for e in results]
    body = outs[0] if len(outs) == 1 else Tuple(tuple(outs))
    names = tuple(g.value_name(e) for e in results)
    fn = Function(tuple(params.values()), body)
    return Stage(index, IRModule({"main": fn}, names), tuple(p.name for p in params.values()), names,
                 tuple(forward), span)


def _describe_cut(g: StageGraph, b: int) -> tuple[tuple[str, str, str, int], ...]:
    made = [*g.inputs, *g.nodes[:b]]
    crossing = [e for e in made if g.last_use.get(id(e), INPUT_POS) >= b]
    return tuple((g.value_name(e), _source(e), type_str(e.type), type_bytes(e.type)) for e in crossing)


def _source(e: Expr) -> str:
    if isinstance(e, Var):
        return "model input"
    name = getattr(e, "name", "")
    op = getattr(getattr(e, "op", None), "name", type(e).__name__)
    return f"{op} {name!r}" if name else op

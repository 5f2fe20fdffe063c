"""The AOT build's dataflow half: whether a model runs on the dataflow executor, its schedule and its arena.

kiln.compiler.aot calls `plan_dataflow` after the sequential memory plan: with mode "auto" the cost
model (kiln.compiler.dataflow_choice) decides, "always" is the user's explicit choice, "never" the
compiled sequential entry alone. A dataflow plan keeps the sequential plan's order (its
`kiln_model_run` stays a valid way to run the same library) but replaces the offsets by ones safe
under every schedule (kiln.compiler.concurrent_memory).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from kiln.compiler.concurrent_memory import plan_concurrent_memory
from kiln.compiler.dataflow_choice import DataflowChoice, StepWork, choose
from kiln.compiler.flop_count import function_flops
from kiln.compiler.memory_plan import MemoryPlan, Step
from kiln.compiler.step_graph import step_graph
from kiln.errors import KilnError
from kiln.ir.expr import Function
from kiln.runtime.dataflow_executor import DataflowSchedule
from kiln.target import Target

MODES = ("never", "auto", "always")


@dataclass(frozen=True)
class DataflowPlan:
    choice: DataflowChoice
    schedule: DataflowSchedule
    memory: MemoryPlan  # the sequential plan's order, offsets safe under concurrency


def plan_dataflow(steps: Sequence[Step], groups: Sequence[Function], nbytes: Callable[[Hashable], int],
                  sequential: MemoryPlan, target: Target, mode: str, limit: int | None = None) -> DataflowPlan | None:
    """The dataflow plan of the calls `steps` (their fused `groups`, `nbytes` per tensor) when `mode`
    and, for "auto", the cost model choose it for `target`'s cores; None: the compiled sequential entry
    runs the model."""
    if mode not in MODES:
        raise KilnError(f"dataflow mode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "never":
        return None
    ordered = [steps[i] for i in sequential.order]
    work = [StepWork(function_flops(groups[i]), sum(nbytes(t) for t in (*steps[i].inputs, *steps[i].outputs)))
            for i in sequential.order]
    cores = target.cores
    choice = choose(step_graph(ordered), work, cores)
    if mode == "auto" and not choice.use:
        return None
    memory = plan_concurrent_memory(ordered, sequential.sizes, limit)
    workers = max(choice.workers, min(2, cores)) if mode == "always" else choice.workers
    schedule = DataflowSchedule(choice.tasks, choice.deps, choice.priority, workers, max(cores // workers, 1),
                                str(choice), target.threading)
    return DataflowPlan(choice, schedule, dataclasses.replace(memory, order=sequential.order, search=sequential.search))

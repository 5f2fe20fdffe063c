"""Dataflow or compiled sequential: a cost model decides, per model, before anything is compiled.

The rule. Each kernel's one-core time is estimated from its work: flops (kiln.compiler.flop_count)
at FLOP_RATE plus the bytes it reads and writes at BYTE_RATE. Sequential runs every kernel on all
`cores`: intra-op speedup 1 + (cores - 1) * INTRA_EFFICIENCY, plus FORK_JOIN_S per kernel for the
team's fork and closing barrier. Dataflow runs chains of kernels (kiln.compiler.step_graph.chains)
as tasks on W workers of cores // W cores each, simulated by list scheduling with the longest
remaining path first (the executor's own priority), plus DISPATCH_S per task and RUN_S per run
for the Python around the calls. Dataflow is chosen only when the best W's makespan times MARGIN
is still below the sequential time.

Why it is conservative. Every kernel is assumed to parallelize (sequential gets the benefit even
for kernels whose loops are too short to split), INTRA_EFFICIENCY is high, the Python costs are
those of a loaded machine, and the margin is 25%. So dataflow wins the comparison only where the
branches are balanced (the critical path is well under the total work) and kernels are small
enough that a fork/join per kernel is a real part of their time: batch-1 inference of branching
models. A chain (resnet18's shortcut is one 1x1 conv beside two 3x3 convs, mobilenet_v2 and the MLP
are chains) has a critical path near the whole, and splitting its cores only slows each kernel.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from kiln.compiler.step_graph import StepGraph, chains, task_deps

FLOP_RATE = 80e9  # flop/s one core sustains on the compiled kernels (fp32 FMA vectors, batch 1)
BYTE_RATE = 40e9  # bytes/s one core streams through a kernel (batch 1: mostly cache-resident)
INTRA_EFFICIENCY = 0.8  # each extra core of a parallel loop adds this much of one core's speed
FORK_JOIN_S = 4e-6  # per kernel on more than one core: waking the team and the closing barrier
DISPATCH_S = 30e-6  # per task of the dataflow executor: the ready queue, a ctypes call, a wake-up
RUN_S = 80e-6  # per dataflow run: handing the run to the workers and collecting it
MARGIN = 1.25  # dataflow must be predicted this much faster
# NOTE: calibrated on 2 AVX2 cores (scripts/dataflow_bench.py): the first guesses (40e9 flop/s, 20e9 B/s,
# 15 us a task, 40 us a run) predicted sequential 0.219 ms and dataflow 0.127 ms for `ensemble`, measured
# 0.080 and 0.144; with these values all three branching models stay sequential (each measured 0.34-0.56x
# as dataflow), and two branches of 40 convs are chosen and measured 0.511 -> 0.375 ms
MAX_WORKERS = 8


@dataclass(frozen=True)
class StepWork:
    flops: int
    bytes: int  # read and written

    def seconds(self, cores: int) -> float:
        one = self.flops / FLOP_RATE + self.bytes / BYTE_RATE
        if cores == 1:
            return one
        return one / (1 + (cores - 1) * INTRA_EFFICIENCY) + FORK_JOIN_S


@dataclass(frozen=True)
class DataflowChoice:
    """The decision and what it rests on; `tasks`, `deps` and `priority` are what the executor runs."""

    use: bool
    workers: int
    cores_per_worker: int
    sequential_s: float  # predicted
    dataflow_s: float  # predicted, at `workers` (inf when no split applies)
    tasks: tuple[tuple[int, ...], ...]  # chains of steps, in step order
    deps: tuple[tuple[int, ...], ...]  # per task, the tasks it waits for
    priority: tuple[float, ...]  # per task: predicted seconds from its start to the end of the run

    def __str__(self) -> str:
        what = f"dataflow on {self.workers} workers x {self.cores_per_worker} cores" if self.use else "sequential"
        return (f"{what} (predicted: sequential {self.sequential_s * 1e3:.3f} ms, dataflow "
                f"{self.dataflow_s * 1e3:.3f} ms, {len(self.tasks)} tasks)")


def choose(g: StepGraph, work: Sequence[StepWork], cores: int) -> DataflowChoice:
    """The executor for a model whose kernel calls form `g` (`work` per step), on `cores` cores."""
    tasks = chains(g)
    deps = task_deps(g, tasks)
    sequential = sum(w.seconds(cores) for w in work)
    best = (float("inf"), 1, cores, _bottom_levels(tasks, deps, work, cores))
    for workers in range(2, min(cores, MAX_WORKERS, len(tasks)) + 1):
        per = cores // workers
        rank = _bottom_levels(tasks, deps, work, per)
        makespan = _simulate(tasks, deps, work, per, workers, rank) + RUN_S
        if makespan < best[0]:
            best = (makespan, workers, per, rank)
    makespan, workers, per, rank = best
    return DataflowChoice(makespan * MARGIN < sequential, workers, per, sequential, makespan, tuple(tasks),
                          tuple(deps), tuple(rank))


def _task_seconds(task: tuple[int, ...], work: Sequence[StepWork], cores: int) -> float:
    return sum(work[s].seconds(cores) for s in task) + DISPATCH_S


def _bottom_levels(tasks: Sequence[tuple[int, ...]], deps: Sequence[tuple[int, ...]], work: Sequence[StepWork],
                   cores: int) -> list[float]:
    """Per task, its time plus the longest chain of tasks after it (tasks are in topological order)."""
    level = [_task_seconds(t, work, cores) for t in tasks]
    for k in reversed(range(len(tasks))):
        for d in deps[k]:
            level[d] = max(level[d], _task_seconds(tasks[d], work, cores) + level[k])
    return level


def _simulate(tasks: Sequence[tuple[int, ...]], deps: Sequence[tuple[int, ...]], work: Sequence[StepWork],
              cores: int, workers: int, rank: Sequence[float]) -> float:
    """Makespan of list scheduling on `workers` of `cores` each, highest rank first."""
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in tasks]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    ready = [(-rank[k], k) for k in range(len(tasks)) if waiting[k] == 0]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []
    now = 0.0
    while ready or running:
        while ready and len(running) < workers:
            _, k = heapq.heappop(ready)
            heapq.heappush(running, (now + _task_seconds(tasks[k], work, cores), k))
        now, k = heapq.heappop(running)
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (-rank[u], u))
    return now

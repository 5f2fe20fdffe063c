"""The kernel calls of an AOT plan as a DAG: which step reads a tensor another step writes.

The dataflow executor runs steps as soon as their producers are done, so everything that must hold
under any schedule (memory sharing, the cost model's critical path) is decided here from the DAG,
never from the one sequential order. Ancestor sets are Python ints used as bitsets: a graph of n
steps costs n ints of n bits, and "is a before b in every schedule" is one AND.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kiln.compiler.memory_plan import Step


@dataclass(frozen=True)
class StepGraph:
    """Steps numbered in a topological order; edges from each tensor's producer to its readers."""

    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    ancestors: tuple[int, ...]  # bit j of ancestors[i]: step j finishes before step i starts, always

    def __len__(self) -> int:
        return len(self.preds)

    def before(self, i: int, j: int) -> bool:
        """Step i is done before step j starts in every schedule (i is a strict ancestor of j)."""
        return bool(self.ancestors[j] >> i & 1)


def step_graph(steps: Sequence[Step]) -> StepGraph:
    """The DAG of `steps`, given in a valid topological order (a producer before its readers; a tensor
    no earlier step writes is external: an input or a weight)."""
    producer: dict[Hashable, int] = {}
    preds: list[tuple[int, ...]] = []
    for i, s in enumerate(steps):
        preds.append(tuple(sorted({producer[t] for t in s.inputs if t in producer})))
        for t in s.outputs:
            producer[t] = i
    succs: list[list[int]] = [[] for _ in steps]
    ancestors: list[int] = []
    for i, ps in enumerate(preds):
        mask = 0
        for p in ps:
            succs[p].append(i)
            mask |= ancestors[p] | 1 << p
        ancestors.append(mask)
    return StepGraph(tuple(preds), tuple(tuple(s) for s in succs), tuple(ancestors))


def chains(g: StepGraph) -> list[tuple[int, ...]]:
    """The steps grouped into maximal chains (u's only successor is v and v's only predecessor is u):
    a chain runs as one task, one call into the library, since nothing can run between its steps
    that could not run beside the whole chain as well."""
    out: list[tuple[int, ...]] = []
    for i in range(len(g)):
        if len(g.preds[i]) == 1 and len(g.succs[g.preds[i][0]]) == 1:
            continue  # continues its predecessor's chain
        chain = [i]
        while len(g.succs[chain[-1]]) == 1 and len(g.preds[g.succs[chain[-1]][0]]) == 1:
            chain.append(g.succs[chain[-1]][0])
        out.append(tuple(chain))
    return out


def task_deps(g: StepGraph, tasks: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """For each task, the tasks that must finish before it starts (the owners of its first step's
    predecessors: only a chain's first step has predecessors outside the chain)."""
    owner = {s: k for k, task in enumerate(tasks) for s in task}
    return [tuple(sorted({owner[p] for p in g.preds[task[0]]})) for task in tasks]


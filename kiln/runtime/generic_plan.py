"""The order the generic tier runs a flat graph in, found once per executor.

The reference interpreter finds what to evaluate next as it goes (a stack, a scope lookup per node per
visit, each weight a node visited every run): for an imported CNN that walk cost as much as a tenth of
the run. An imported graph is most often flat (calls, tuples and constants; no If, Let or function), and
for one the steps are fixed: a `Plan` lists them once, with the constants' values and, after each step,
the values no later step reads (dropped, so a run holds only live tensors). A graph with control flow
has no plan and runs on the interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kiln.ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem, Var
from kiln.runtime.generic_fusion import Chain


@dataclass(frozen=True)
class Plan:
    steps: tuple[Expr, ...]  # calls, tuples and tuple fields, each after every step it reads
    constants: dict[int, Any]  # the value of every constant read, by node id
    dead: tuple[tuple[int, ...], ...]  # per step: ids of the values no later step reads


def _reads(e: Expr, chains: dict[int, Chain]) -> tuple[Expr, ...] | None:
    """What step `e` reads (a chain's last call: the chain's inputs), or None where `e` is no plain step."""
    if id(e) in chains:
        return chains[id(e)].inputs
    if isinstance(e, Call):
        return e.args if isinstance(e.op, Op) else None
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    return None


def make_plan(root: Expr, chains: dict[int, Chain]) -> Plan | None:
    """The plan of the graph under `root` (chains run by their last call), or None where it is not flat."""
    steps: list[Expr] = []
    constants: dict[int, Any] = {}
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        e, expanded = stack.pop()
        if id(e) in seen and not expanded:
            continue
        if isinstance(e, Constant):
            constants[id(e)] = e.data
            seen.add(id(e))
            continue
        if isinstance(e, Var):
            seen.add(id(e))
            continue
        reads = _reads(e, chains)
        if reads is None:
            return None
        if expanded:
            steps.append(e)
            continue
        seen.add(id(e))
        stack.append((e, True))
        stack.extend((r, False) for r in reversed(reads) if id(r) not in seen)
    return Plan(tuple(steps), constants, _dead_after(steps, chains, root))


def _dead_after(steps: list[Expr], chains: dict[int, Chain], root: Expr) -> tuple[tuple[int, ...], ...]:
    last: dict[int, int] = {}
    for i, e in enumerate(steps):
        for r in _reads(e, chains) or ():
            last[id(r)] = i
    last.pop(id(root), None)
    dead: list[list[int]] = [[] for _ in steps]
    for key, i in last.items():
        dead[i].append(key)
    return tuple(tuple(d) for d in dead)

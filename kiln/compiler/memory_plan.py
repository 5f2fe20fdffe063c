"""Static memory planning: an operator order and one arena for every intermediate tensor.

The plan works on an abstract graph (steps that read and write tensor ids) so it is independent of
the IR and can be tested on random DAGs. A tensor lives from the step that writes it to the last
step that reads it, both included: a kernel never writes over its own inputs. The order comes from
kiln.compiler.memory_order (the minimum-peak order where the search finishes in its budget, else the
best heuristic); the offsets from kiln.compiler.memory_pack (several greedy packings, the smallest
kept). Among the searched order and the heuristic ones the plan keeps the smallest arena.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kiln.compiler.memory_order import DEFAULT_BUDGET_S, OrderSearch, build_graph, heuristic_orders, min_peak_order
from kiln.compiler.memory_pack import arena_size, pack
from kiln.errors import MemoryLimitError
from kiln.ir.aligned import ALIGN  # noqa: F401  (re-exported)
from kiln.ir.sizes import format_bytes
from kiln.runtime.aot_executor import check_strategy


@dataclass(frozen=True)
class Step:
    """One kernel call: the tensors it reads and writes (ids without a planned size are external)."""

    name: str
    inputs: tuple[Hashable, ...]
    outputs: tuple[Hashable, ...]


@dataclass(frozen=True)
class MemoryPlan:
    order: tuple[int, ...]  # indices into the steps, in execution order
    offsets: dict[Hashable, int]  # byte offset of each planned tensor in the arena
    lifetimes: dict[Hashable, tuple[int, int]]  # first and last position in `order`, inclusive
    sizes: dict[Hashable, int]
    arena_bytes: int
    lower_bound: int  # max over positions of the bytes alive at once: no arena can be smaller
    naive_bytes: int  # every intermediate in its own buffer
    search: OrderSearch  # the minimum-peak search (its order, peak, time, exactness)




def plan_memory(steps: Sequence[Step], sizes: dict[Hashable, int], limit: int | None = None, *,
                budget_s: float = DEFAULT_BUDGET_S, strategy: str = "arena") -> MemoryPlan:
    """Plan `steps` (given in a valid topological order) with the tensors in `sizes` in one arena within
    about `budget_s` seconds: two thirds for the minimum-peak order search, the rest (at least as much
    again when the search used it all) for the packings' promotions.

    Raises MemoryLimitError when `limit` (bytes) is given and the run would take more: the arena for
    the "arena" strategy, the order's peak of live bytes for "counted" (allocation at run time)."""
    check_strategy(strategy)
    _check_graph(steps, sizes)
    search = min_peak_order(steps, sizes, budget_s * 2 / 3)
    deadline = time.monotonic() + budget_s / 3
    candidates = [search.order, *heuristic_orders(build_graph(steps, sizes)).values()]
    best: MemoryPlan | None = None
    for order in dict.fromkeys(candidates if strategy == "arena" else candidates[:1]):
        plan = _plan_for_order(steps, sizes, order, search, deadline)
        if best is None or (plan.arena_bytes, plan.lower_bound) < (best.arena_bytes, best.lower_bound):
            best = plan
    check_limit(best, strategy, limit)
    return best


def check_limit(plan: MemoryPlan, strategy: str, limit: int | None) -> None:
    """MemoryLimitError, before anything runs, when the strategy's bytes exceed `limit`."""
    if limit is None:
        return
    need, what = (plan.arena_bytes, "an arena") if strategy == "arena" else (plan.lower_bound, "a peak")
    if need > limit:
        raise MemoryLimitError(
            f"the model needs {what} of {need} bytes ({format_bytes(need)}) for its intermediate tensors "
            f"(memory strategy {strategy!r}), more than the memory limit of {limit} bytes "
            f"({format_bytes(limit)}); live-bytes peak {plan.lower_bound} bytes at the best operator order "
            f"found, arena {plan.arena_bytes} bytes, naive sum {plan.naive_bytes} bytes")


def _check_graph(steps: Sequence[Step], sizes: dict[Hashable, int]) -> None:
    written: set[Hashable] = set()
    for s in steps:
        for t in s.inputs:
            if t in sizes and t not in written:
                raise ValueError(f"step {s.name!r} reads tensor {t!r} before any step writes it")
        for t in s.outputs:
            if t in written:
                raise ValueError(f"tensor {t!r} is written twice (again by step {s.name!r})")
            written.add(t)
    missing = [t for t in sizes if t not in written]
    if missing:
        raise ValueError(f"planned tensors {missing!r} are written by no step")


def _plan_for_order(steps: Sequence[Step], sizes: dict[Hashable, int], order: tuple[int, ...],
                    search: OrderSearch, deadline: float) -> MemoryPlan:
    life: dict[Hashable, list[int]] = {}
    for pos, i in enumerate(order):
        for t in steps[i].outputs:
            if t in sizes:
                life[t] = [pos, pos]
        for t in steps[i].inputs:
            if t in sizes:
                life[t][1] = pos
    lifetimes = {t: (a, b) for t, (a, b) in life.items()}
    alive = [0] * len(order)
    for t, (a, b) in lifetimes.items():
        for pos in range(a, b + 1):
            alive[pos] += sizes[t]
    offsets = pack(lifetimes, sizes, deadline)
    return MemoryPlan(order, offsets, lifetimes, dict(sizes), arena_size(offsets, sizes), max(alive, default=0),
                      sum(sizes.values()), search)



"""Static memory planning: an operator order and one arena for every intermediate tensor.

The plan works on an abstract graph (steps that read and write tensor ids) so it is independent of
the IR and can be tested on random DAGs. A tensor lives from the step that writes it to the last
step that reads it, both included: a kernel never writes over its own inputs. Among the
topological orders we keep the one (of a few deterministic candidates) whose arena is smallest;
offsets are assigned greedily by size, largest first, at the lowest 64-byte-aligned offset that
overlaps no tensor alive at the same time.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kiln.errors import MemoryLimitError  # noqa: F401  (re-exported)
from kiln.ir.aligned import ALIGN


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


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(steps: Sequence[Step], sizes: dict[Hashable, int], limit: int | None = None) -> MemoryPlan:
    """Plan `steps` (given in a valid topological order) with the tensors in `sizes` in one arena.

    Raises MemoryLimitError when `limit` (bytes) is given and the arena is larger."""
    _check_graph(steps, sizes)
    best: MemoryPlan | None = None
    candidates = [tuple(range(len(steps))), _greedy_order(steps, sizes)]
    for order in dict.fromkeys(candidates):
        plan = _plan_for_order(steps, sizes, order)
        if best is None or (plan.arena_bytes, plan.lower_bound) < (best.arena_bytes, best.lower_bound):
            best = plan
    if limit is not None and best.arena_bytes > limit:
        raise MemoryLimitError(
            f"the model needs an arena of {best.arena_bytes} bytes for its intermediate tensors, more "
            f"than the memory limit of {limit} bytes (lower bound {best.lower_bound} bytes at the best "
            f"operator order found)")
    return best


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


def _greedy_order(steps: Sequence[Step], sizes: dict[Hashable, int]) -> tuple[int, ...]:
    """List scheduling: run the ready step that frees the most bytes net of what it allocates;
    ties go to the step that came first, so the result is deterministic."""
    producer = {t: i for i, s in enumerate(steps) for t in s.outputs}
    readers: dict[Hashable, set[int]] = {}
    for i, s in enumerate(steps):
        for t in set(s.inputs):
            if t in producer:
                readers.setdefault(t, set()).add(i)
    waiting = [len({producer[t] for t in s.inputs if t in producer}) for s in steps]
    users: list[set[int]] = [set() for _ in steps]
    for i, s in enumerate(steps):
        for t in s.inputs:
            if t in producer:
                users[producer[t]].add(i)
    ready = {i for i, n in enumerate(waiting) if n == 0}
    order: list[int] = []
    while ready:
        def gain(i: int) -> int:
            freed = sum(sizes.get(t, 0) for t in set(steps[i].inputs) if readers.get(t) == {i})
            return freed - sum(sizes.get(t, 0) for t in steps[i].outputs)

        pick = max(ready, key=lambda i: (gain(i), -i))
        ready.remove(pick)
        order.append(pick)
        for t in set(steps[pick].inputs):
            readers.get(t, set()).discard(pick)
        for u in users[pick]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.add(u)
    return tuple(order)


def _plan_for_order(steps: Sequence[Step], sizes: dict[Hashable, int], order: tuple[int, ...]) -> MemoryPlan:
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
    offsets = assign_offsets(lifetimes, sizes)
    arena = max((align(o + sizes[t]) for t, o in offsets.items()), default=0)
    return MemoryPlan(order, offsets, lifetimes, dict(sizes), arena, max(alive, default=0), sum(sizes.values()))


def assign_offsets(lifetimes: dict[Hashable, tuple[int, int]], sizes: dict[Hashable, int]) -> dict[Hashable, int]:
    """Greedy by size: largest first (then earliest), at the lowest aligned offset clear of every
    placed tensor whose lifetime intersects."""
    ranked = sorted(lifetimes, key=lambda t: (-sizes[t], lifetimes[t], str(t)))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[Hashable, int] = {}
    for t in ranked:
        first, last = lifetimes[t]
        size = sizes[t]
        clashes = sorted((o, e) for o, e, a, b in placed if a <= last and first <= b)
        offset = 0
        for o, e in clashes:
            if offset + size <= o:
                break
            offset = max(offset, align(e))
        offsets[t] = offset
        placed.append((offset, offset + size, first, last))
    return offsets

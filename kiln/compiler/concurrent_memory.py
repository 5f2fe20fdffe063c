"""An arena plan that stays correct when independent kernels run at the same time.

The sequential plan (kiln.compiler.memory_plan) lets two tensors share bytes when their lifetimes
in ONE order do not intersect. Under the dataflow executor any topological order can happen, and
two kernels of different branches can run at once. So here tensors a and b may share bytes only
when every schedule finishes all uses of one (its producer and its readers) before the other's
producer starts: each use is a strict ancestor of that producer in the step DAG. Offsets are then
assigned greedily by size, as in the sequential plan, against this conflict relation.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from kiln.compiler.memory_order import OrderSearch
from kiln.compiler.memory_pack import align
from kiln.compiler.memory_plan import MemoryPlan, Step
from kiln.compiler.step_graph import StepGraph, step_graph
from kiln.errors import MemoryLimitError


class _Uses:
    """Each planned tensor's producer and the bitset of the steps that use it."""

    def __init__(self, steps: Sequence[Step], sizes: dict[Hashable, int], g: StepGraph):
        self.g = g
        self.producer: dict[Hashable, int] = {}
        self.users: dict[Hashable, int] = {}
        for i, s in enumerate(steps):
            for t in s.outputs:
                if t in sizes:
                    self.producer[t] = i
                    self.users[t] = 1 << i
            for t in s.inputs:
                if t in self.users:
                    self.users[t] |= 1 << i

    def ordered(self, a: Hashable, b: Hashable) -> bool:
        """Every use of a is done before b is first written, in every schedule."""
        return self.users[a] & ~self.g.ancestors[self.producer[b]] == 0

    def apart(self, a: Hashable, b: Hashable) -> bool:
        return self.ordered(a, b) or self.ordered(b, a)


def plan_concurrent_memory(steps: Sequence[Step], sizes: dict[Hashable, int],
                           limit: int | None = None) -> MemoryPlan:
    """Offsets for `sizes` safe under every schedule of `steps` (given in the order the sequential
    entry runs them; lifetimes and the lower bound in the plan are of that order).

    Raises MemoryLimitError when `limit` (bytes) is given and the arena is larger."""
    uses = _Uses(steps, sizes, step_graph(steps))
    ranked = sorted(uses.producer, key=lambda t: (-sizes[t], uses.producer[t], str(t)))
    placed: list[tuple[int, int, Hashable]] = []  # (offset, end, tensor)
    offsets: dict[Hashable, int] = {}
    for t in ranked:
        offset = 0
        for o, e, _ in sorted(p for p in placed if not uses.apart(p[2], t)):
            if offset + sizes[t] <= o:
                break
            offset = max(offset, align(e))
        offsets[t] = offset
        placed.append((offset, offset + sizes[t], t))
    arena = max((align(o + sizes[t]) for t, o in offsets.items()), default=0)
    lifetimes = _lifetimes(steps, sizes)
    order, peak = tuple(range(len(steps))), _peak(lifetimes, sizes, len(steps))
    plan = MemoryPlan(order, offsets, lifetimes, dict(sizes), arena, peak, sum(sizes.values()),
                      OrderSearch(order, peak, False, 0.0, peak, {}, 1))
    if limit is not None and arena > limit:
        raise MemoryLimitError(
            f"the model needs an arena of {arena} bytes for its intermediate tensors when independent "
            f"kernels run at the same time (dataflow executor), more than the memory limit of {limit} bytes")
    return plan


def check_concurrent_plan(steps: Sequence[Step], plan: MemoryPlan) -> list[str]:
    """Every pair of tensors whose arena bytes overlap although some schedule has both alive at
    once (empty: the plan is safe for the dataflow executor)."""
    uses = _Uses(steps, plan.sizes, step_graph(steps))
    spans = sorted((o, o + plan.sizes[t], str(t), t) for t, o in plan.offsets.items())
    bad = []
    for k, (_, e, _, a) in enumerate(spans):
        for o2, e2, _, b in spans[k + 1:]:
            if o2 >= e:
                break
            if not uses.apart(a, b):
                bad.append(f"tensors {a!r} and {b!r} share arena bytes [{o2}, {min(e, e2)}) but can be "
                           "alive at once")
    return bad


def _lifetimes(steps: Sequence[Step], sizes: dict[Hashable, int]) -> dict[Hashable, tuple[int, int]]:
    life: dict[Hashable, list[int]] = {}
    for pos, s in enumerate(steps):
        for t in s.outputs:
            if t in sizes:
                life[t] = [pos, pos]
        for t in s.inputs:
            if t in life:
                life[t][1] = pos
    return {t: (a, b) for t, (a, b) in life.items()}


def _peak(lifetimes: dict[Hashable, tuple[int, int]], sizes: dict[Hashable, int], n: int) -> int:
    alive = [0] * n
    for t, (a, b) in lifetimes.items():
        for pos in range(a, b + 1):
            alive[pos] += sizes[t]
    return max(alive, default=0)

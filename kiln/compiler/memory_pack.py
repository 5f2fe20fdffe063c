"""Offsets in one arena for tensors with known lifetimes: several greedy packings, the smallest kept.

Packing intervals of time x bytes into the fewest bytes is NP-hard; greedy placements come close, but
which one wins depends on the graph (a long-lived large tensor, many small ones). Each packing ranks
the tensors (largest first as TFLite's greedy by size; by the breadth of the busiest step first as
TFLite's greedy by breadth; by first use) and places each at the lowest offset clear of every placed
tensor alive at the same time (first fit) or in the tightest such gap (best fit). A greedy placement
that ends above the liveness bound is improved by promotion: the tensor that ends highest moves to the
front of the ranking and everything is placed again (resnet18's residual blocks: x1.18 of the bound
with greedy by size alone, exactly the bound after 8 promotions).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable

from kiln.ir.aligned import ALIGN

Lifetimes = dict[Hashable, tuple[int, int]]


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def arena_size(offsets: dict[Hashable, int], sizes: dict[Hashable, int]) -> int:
    return max((align(o + sizes[t]) for t, o in offsets.items()), default=0)


MAX_PROMOTIONS = 200


def pack(lifetimes: Lifetimes, sizes: dict[Hashable, int], deadline: float = math.inf) -> dict[Hashable, int]:
    """The smallest arena's offsets among every ranking x fit with promotions (ties: the first, greedy
    by size first fit); stops as soon as one reaches the liveness bound. Past `deadline` (time.monotonic)
    no promotion or further ranking x fit starts: the best so far (at least greedy by size) is kept."""
    floor = align(liveness_bound(lifetimes, sizes))
    best: dict[Hashable, int] = {}
    for rank in RANKINGS.values():
        for best_fit in (False, True):
            offsets = _promote(rank(lifetimes, sizes), lifetimes, sizes, best_fit, floor, deadline)
            if not best or arena_size(offsets, sizes) < arena_size(best, sizes):
                best = offsets
            if arena_size(best, sizes) <= floor or time.monotonic() > deadline:
                return best
    return best


def liveness_bound(lifetimes: Lifetimes, sizes: dict[Hashable, int]) -> int:
    """The most bytes alive at one step: no arena is smaller."""
    alive: dict[int, int] = {}
    for t, (a, b) in lifetimes.items():
        for pos in range(a, b + 1):
            alive[pos] = alive.get(pos, 0) + sizes[t]
    return max(alive.values(), default=0)


def _promote(ranked: list[Hashable], lifetimes: Lifetimes, sizes: dict[Hashable, int], best_fit: bool,
             floor: int, deadline: float) -> dict[Hashable, int]:
    """Place, then move the tensor ending highest to the front and place again, keeping the smallest,
    until the bound is reached, a promotion repeats its ranking, MAX_PROMOTIONS, or the deadline."""
    best: dict[Hashable, int] = {}
    ranked = list(ranked)
    for _ in range(min(MAX_PROMOTIONS, 2 * len(ranked)) + 1):
        offsets = place(ranked, lifetimes, sizes, best_fit)
        if not best or arena_size(offsets, sizes) < arena_size(best, sizes):
            best = offsets
        if arena_size(offsets, sizes) <= floor or not ranked or time.monotonic() > deadline:
            break
        top = max(ranked, key=lambda t: (offsets[t] + sizes[t], -ranked.index(t)))
        if ranked[0] == top:
            break
        ranked.remove(top)
        ranked.insert(0, top)
    return best


def by_size(lifetimes: Lifetimes, sizes: dict[Hashable, int]) -> list[Hashable]:
    return sorted(lifetimes, key=lambda t: (-sizes[t], lifetimes[t], str(t)))


def by_breadth(lifetimes: Lifetimes, sizes: dict[Hashable, int]) -> list[Hashable]:
    """The tensors of the step with the most bytes alive first (largest first), then the next busiest."""
    alive: dict[int, list[Hashable]] = {}
    for t, (a, b) in lifetimes.items():
        for pos in range(a, b + 1):
            alive.setdefault(pos, []).append(t)
    width = {pos: sum(sizes[t] for t in ts) for pos, ts in alive.items()}
    ranked: dict[Hashable, None] = {}
    for pos in sorted(alive, key=lambda p: (-width[p], p)):
        ranked.update(dict.fromkeys(sorted(alive[pos], key=lambda t: (-sizes[t], str(t)))))
    return list(ranked)


def by_start(lifetimes: Lifetimes, sizes: dict[Hashable, int]) -> list[Hashable]:
    return sorted(lifetimes, key=lambda t: (lifetimes[t][0], -sizes[t], str(t)))


RANKINGS: dict[str, Callable[[Lifetimes, dict[Hashable, int]], list[Hashable]]] = {
    "size": by_size, "breadth": by_breadth, "start": by_start}


def place(ranked: list[Hashable], lifetimes: Lifetimes, sizes: dict[Hashable, int],
          best_fit: bool) -> dict[Hashable, int]:
    """Each tensor in turn at an aligned offset clear of the placed tensors whose lifetimes intersect its."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[Hashable, int] = {}
    for t in ranked:
        first, last = lifetimes[t]
        size = sizes[t]
        clashes = sorted((o, e) for o, e, a, b in placed if a <= last and first <= b)
        offsets[t] = _gap(clashes, size, best_fit)
        placed.append((offsets[t], offsets[t] + size, first, last))
    return offsets


def _gap(clashes: list[tuple[int, int]], size: int, best_fit: bool) -> int:
    """The lowest (first fit) or tightest (best fit) aligned gap of `size` bytes among `clashes`
    (sorted (offset, end) pairs), else the first offset above them all."""
    offset, best, best_room = 0, None, None
    for o, e in clashes:
        if offset + size <= o:
            if not best_fit:
                return offset
            room = o - offset
            if best_room is None or room < best_room:
                best, best_room = offset, room
        offset = max(offset, align(e))
    return offset if best is None else best

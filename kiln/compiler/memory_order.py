"""Memory-aware operator ordering: the topological order of the steps with the lowest peak of live bytes.

The peak of an order is the largest number of bytes alive at one step (a tensor lives from the step
that writes it to the last step that reads it, both included; kiln.compiler.memory_plan packs the
arena to it). The bytes alive once a set S of steps has run depend only on S (what S wrote and
some step outside S still reads), so the minimum peak is a shortest-path problem over the sets of
scheduled steps (SERENITY, Ahn et al. 2020): dynamic programming level by level (|S| = k), one
entry per set keeping the lowest peak that reaches it. Three things keep it small:

- cut points: a step every other step is an ancestor or a descendant of splits the graph; what
  comes before it must finish first in every order, so each segment between cuts is searched alone;
- the bound: a partial order whose peak already reaches the best known complete one is dropped;
- a dominance rule: a ready step that frees at least what it keeps and does not raise the peak so far
  is run at once (moving it earlier in any completion raises no step's live bytes).

A time budget (and a cap on the sets kept) bounds the search; a segment it cannot finish keeps the best
heuristic order's (program order, greedy by bytes freed, greedy by size). `exact` says whether every segment finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiln.compiler.memory_plan import Step

DEFAULT_BUDGET_S = 3.0
_CHECK_EVERY = 64  # expansions between two reads of the clock
MAX_STATES = 400_000  # sets kept for one segment (about 100 MB of Python objects): beyond, as if out of time


@dataclass(frozen=True)
class OrderSearch:
    """The order the search chose and what it knows about it."""

    order: tuple[int, ...]  # indices into the steps
    peak: int  # its live-bytes peak
    exact: bool  # every segment searched to the end: no topological order has a lower peak
    seconds: float
    topological_peak: int  # the peak of the steps in the order given
    heuristic_peaks: dict[str, int]  # per heuristic order: its peak
    segments: int  # how many pieces the cut points split the graph into


@dataclass(frozen=True)
class _Graph:
    """The steps as bitmask-friendly tables: per step its predecessors and what it allocates."""

    preds: list[int]  # bitmask of the steps that write what the step reads
    succs: list[int]  # bitmask of the steps that read what the step writes
    out_bytes: list[int]  # planned bytes it writes (alive during the step)
    kept_bytes: list[int]  # of those, the bytes some later step reads
    reads: list[list[tuple[int, int]]]  # per step: (bytes, readers bitmask) of each planned tensor it reads


def build_graph(steps: Sequence[Step], sizes: dict[Hashable, int]) -> _Graph:
    producer = {t: i for i, s in enumerate(steps) for t in s.outputs}
    readers: dict[Hashable, int] = {}
    preds = [0] * len(steps)
    for i, s in enumerate(steps):
        for t in s.inputs:
            if t in producer:
                preds[i] |= 1 << producer[t]
                if t in sizes:
                    readers[t] = readers.get(t, 0) | 1 << i
    out_bytes = [sum(sizes.get(t, 0) for t in set(s.outputs)) for s in steps]
    kept = [sum(sizes[t] for t in set(s.outputs) if t in readers) for s in steps]
    reads = [[(sizes[t], readers[t]) for t in set(s.inputs) if t in sizes] for s in steps]
    succs = [0] * len(steps)
    for i, p in enumerate(preds):
        while p:
            j = (p & -p).bit_length() - 1
            succs[j] |= 1 << i
            p &= p - 1
    return _Graph(preds, succs, out_bytes, kept, reads)


def order_peak(g: _Graph, order: Sequence[int]) -> int:
    """The most bytes alive at any step of `order`."""
    done = live = peak = 0
    for i in order:
        peak = max(peak, live + g.out_bytes[i])
        done |= 1 << i
        live += g.kept_bytes[i] - _freed(g, i, done)
    return peak


def _freed(g: _Graph, i: int, done: int) -> int:
    """Bytes step i frees once the steps in `done` (i among them) have run: inputs no step left reads."""
    return sum(size for size, readers in g.reads[i] if readers & ~done == 0)


def heuristic_orders(g: _Graph) -> dict[str, tuple[int, ...]]:
    """The cheap orders the search starts from and falls back to."""
    def net_freed(i: int, live: int, done: int) -> tuple:  # today's greedy: most bytes freed net of kept
        return -(_freed(g, i, done | 1 << i) - g.kept_bytes[i]), i

    def smallest(i: int, live: int, done: int) -> tuple:  # greedy by size: the smallest step next
        return live + g.out_bytes[i], g.out_bytes[i], i

    return {"program": tuple(range(len(g.preds))), "greedy-free": _list_schedule(g, net_freed),
            "greedy-size": _list_schedule(g, smallest)}


def _list_schedule(g: _Graph, key: Callable[[int, int, int], tuple]) -> tuple[int, ...]:
    """Run the ready step with the smallest key(step, live bytes, done mask) until all have run."""
    n = len(g.preds)
    done = live = 0
    order: list[int] = []
    while len(order) < n:
        ready = [i for i in range(n) if not done >> i & 1 and g.preds[i] & ~done == 0]
        pick = min(ready, key=lambda i: key(i, live, done))
        order.append(pick)
        done |= 1 << pick
        live += g.kept_bytes[pick] - _freed(g, pick, done)
    return tuple(order)


def cut_points(g: _Graph) -> list[int]:
    """Steps (in index order, which is topological) that are an ancestor or descendant of every other."""
    n = len(g.preds)
    anc = [0] * n
    for i in range(n):
        m, p = 0, g.preds[i]
        while p:
            j = (p & -p).bit_length() - 1
            m |= anc[j] | 1 << j
            p &= p - 1
        anc[i] = m
    desc = [0] * n
    for i in range(n):
        m = anc[i]
        while m:
            j = (m & -m).bit_length() - 1
            desc[j] |= 1 << i
            m &= m - 1
    full = (1 << n) - 1
    return [i for i in range(n) if (anc[i] | desc[i] | 1 << i) == full]


def segments(g: _Graph) -> list[list[int]]:
    """The steps split at the cut points: each cut alone, the runs between cuts as one segment each."""
    cuts = set(cut_points(g))
    out: list[list[int]] = []
    run: list[int] = []
    for i in range(len(g.preds)):
        if i in cuts:
            if run:
                out.append(run)
                run = []
            out.append([i])
        else:
            run.append(i)
    if run:
        out.append(run)
    return out


def min_peak_order(steps: Sequence[Step], sizes: dict[Hashable, int],
                   budget_s: float = DEFAULT_BUDGET_S) -> OrderSearch:
    """The lowest-peak order found within `budget_s` seconds (see the module doc). `steps` must be
    given in a valid topological order."""
    t0 = time.monotonic()
    g = build_graph(steps, sizes)
    heuristics = heuristic_orders(g)
    peaks = {name: order_peak(g, o) for name, o in heuristics.items()}
    pieces = segments(g)
    deadline = t0 + budget_s
    order: list[int] = []
    exact = True
    done = 0
    for seg in pieces:
        best = _best_heuristic(g, seg, done, heuristics.values())
        if len(seg) > 1:
            found = _search_segment(g, seg, done, best, deadline)
            exact &= found is not None
            if found is not None:
                best = found
        order.extend(best)
        for i in seg:
            done |= 1 << i
    final = tuple(order)
    return OrderSearch(final, order_peak(g, final), exact, time.monotonic() - t0, peaks["program"], peaks, len(pieces))


def _best_heuristic(g: _Graph, seg: list[int], done: int, orders) -> list[int]:
    """Among the heuristic orders restricted to the segment, the one with the lowest segment peak."""
    members = set(seg)
    candidates = [[i for i in o if i in members] for o in orders]
    return min(candidates, key=lambda o: _segment_peak(g, o, done))


def _segment_peak(g: _Graph, order: Sequence[int], done: int) -> int:
    live, peak = _live(g, done), 0
    for i in order:
        peak = max(peak, live + g.out_bytes[i])
        done |= 1 << i
        live += g.kept_bytes[i] - _freed(g, i, done)
    return peak


def _live(g: _Graph, done: int) -> int:
    """Bytes alive once exactly the steps in `done` have run."""
    live = 0
    for i in range(len(g.preds)):
        if done >> i & 1:
            live += g.kept_bytes[i]
            live -= _freed(g, i, done)
    return live


def _search_segment(g: _Graph, seg: list[int], done: int, heuristic: list[int],
                    deadline: float) -> list[int] | None:
    """A minimum-peak order of the segment's steps after the steps in `done`, or None when the deadline
    passes first. States are masks over all steps (`done` | the segment steps run so far)."""
    bound = _segment_peak(g, heuristic, done)
    if bound <= _floor(g, seg, done):
        return heuristic  # no order can do better than the heuristic's
    members = sum(1 << i for i in seg)
    ready = sum(1 << i for i in seg if g.preds[i] & ~done == 0)
    level: dict[int, tuple[int, int, int]] = {done: (0, _live(g, done), ready)}  # state -> (peak, live, ready)
    parent: dict[int, tuple[int, int]] = {}
    expansions = 0
    for _ in seg:
        nxt: dict[int, tuple[int, int, int]] = {}
        for state, (peak, live, ready) in level.items():
            expansions += 1
            if expansions % _CHECK_EVERY == 0 and (time.monotonic() > deadline or len(parent) > MAX_STATES):
                return None
            for i, new_peak, new_live in _moves(g, ready, state, peak, live):
                if new_peak >= bound:
                    continue
                key = state | 1 << i
                old = nxt.get(key)
                if old is None or new_peak < old[0]:
                    nxt[key] = (new_peak, new_live, _ready_after(g, ready, key, i, members))
                    parent[key] = (state, i)
        if not nxt:
            return heuristic  # every order reaching further peaks at or above the heuristic's
        level = nxt
    (state,) = level
    order: list[int] = []
    while state != done:
        state, i = parent[state]
        order.append(i)
    return order[::-1]


def _ready_after(g: _Graph, ready: int, state: int, i: int, members: int) -> int:
    """The ready mask once step i has run (`state` includes it): i leaves, its successors whose
    predecessors have all run join."""
    ready &= ~(1 << i)
    succ = g.succs[i] & members
    while succ:
        j = (succ & -succ).bit_length() - 1
        if g.preds[j] & ~state == 0:
            ready |= 1 << j
        succ &= succ - 1
    return ready


def _moves(g: _Graph, ready: int, state: int, peak: int, live: int) -> list[tuple[int, int, int]]:
    """(step, peak, live after) of each step worth running next from `state`: a free step alone when
    there is one (it frees at least what it keeps and stays under the peak so far), else every ready step."""
    moves = []
    while ready:
        i = (ready & -ready).bit_length() - 1
        ready &= ready - 1
        after = state | 1 << i
        step = live + g.out_bytes[i]
        new_live = live + g.kept_bytes[i] - _freed(g, i, after)
        if new_live <= live and step <= peak:
            return [(i, peak, new_live)]
        moves.append((i, max(peak, step), new_live))
    return moves


def _floor(g: _Graph, seg: list[int], done: int) -> int:
    """A peak no order of the segment goes under: each step's own inputs and outputs are alive at it."""
    return max(g.out_bytes[i] + sum(size for size, _ in g.reads[i]) for i in seg)

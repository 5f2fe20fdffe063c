"""Where to cut a model into K pipeline stages: the cuts that make the slowest stage (with its transfer) fastest.

A pipeline's throughput is set by its slowest stage, and each stage also hands its crossing values
to the next, so the cuts minimise max over stages of (modelled compute + modelled transfer). Stages
are runs of consecutive nodes of one topological order (kiln.distributed.stage_graph), so the exact
optimum over that order is a dynamic programme: best[k][b] is the least bottleneck of k stages
covering nodes [0, b), from best[k-1][a] and the stage [a, b). Only positions where tensors alone
cross are cuts.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.distributed.stage_cost import CostModel, type_bytes
from kiln.distributed.stage_graph import INPUT_POS, StageGraph
from kiln.errors import KilnError
from kiln.ir.types import TensorType


@dataclass(frozen=True)
class StageSpan:
    """One stage: nodes [start, stop), its modelled compute, and the bytes it hands on (to the next
    stage, or the model's outputs for the last)."""

    start: int
    stop: int
    seconds: float
    out_bytes: int
    transfer_seconds: float

    @property
    def total_seconds(self) -> float:
        return self.seconds + self.transfer_seconds


def choose_cuts(g: StageGraph, stages: int, cost: CostModel) -> list[StageSpan]:
    """The `stages` spans of `g`'s nodes with the least modelled bottleneck."""
    n = len(g.nodes)
    if not isinstance(stages, int) or stages < 1:
        raise KilnError(f"stages must be a positive number of pipeline stages, got {stages!r}")
    cross_bytes, cuttable = _crossings(g)
    cuts = [b for b in range(1, n) if cuttable[b]]
    if stages > len(cuts) + 1:
        raise KilnError(f"the model has {n} operators and {len(cuts)} places to cut (where only tensors cross), "
                        f"so at most {len(cuts) + 1} stages, not {stages}")
    prefix = [0.0]
    for e in g.nodes:
        prefix.append(prefix[-1] + cost.node_seconds(e))

    def span_cost(a: int, b: int) -> float:
        return prefix[b] - prefix[a] + cost.transfer_seconds(cross_bytes[b])

    ends = [*cuts, n]
    best = {b: (span_cost(0, b), 0) for b in ends}
    back: list[dict[int, int]] = []  # per stage count after the first: a span's end -> its start
    for _ in range(1, stages):
        nxt: dict[int, tuple[float, int]] = {}
        for b in ends:
            options = [(max(best[a][0], span_cost(a, b)), a) for a in cuts if a < b and a in best]
            if options:
                nxt[b] = min(options)
        best = nxt
        back.append({b: a for b, (_, a) in best.items()})
    bounds = [n]
    for level in reversed(back):
        bounds.append(level[bounds[-1]])
    return spans_at(g, bounds[:0:-1], cost)


def spans_at(g: StageGraph, cuts: list[int], cost: CostModel) -> list[StageSpan]:
    """The spans of the cuts given (the positions of the operators each stage after the first starts at)."""
    n = len(g.nodes)
    cross_bytes, cuttable = _crossings(g)
    if any(not isinstance(b, int) or not 0 < b < n for b in cuts) or sorted(set(cuts)) != list(cuts):
        raise KilnError(f"cuts must be increasing operator positions in 1..{n - 1}, got {cuts}")
    bad = [b for b in cuts if not cuttable[b]]
    if bad:
        raise KilnError(f"a tuple value crosses before operator(s) {bad}: a pipeline cuts only where tensors cross")
    seconds = [cost.node_seconds(e) for e in g.nodes]
    bounds = [0, *cuts, n]
    return [StageSpan(a, b, sum(seconds[a:b]), cross_bytes[b], cost.transfer_seconds(cross_bytes[b]))
            for a, b in zip(bounds, bounds[1:], strict=False)]


def _crossings(g: StageGraph) -> tuple[list[int], list[bool]]:
    """Per position b in 0..n: the bytes crossing before b, and whether only tensors cross there.
    A value made at p and last read at q crosses every b with p < b <= q (difference arrays)."""
    n = len(g.nodes)
    nbytes = [0] * (n + 2)
    tuples = [0] * (n + 2)
    made = [(INPUT_POS, p) for p in g.inputs] + list(enumerate(g.nodes))
    for p, e in made:
        q = g.last_use.get(id(e), p)
        if q <= p:
            continue
        nbytes[p + 1] += type_bytes(e.type)
        nbytes[q + 1] -= type_bytes(e.type)
        if not isinstance(e.type, TensorType):
            tuples[p + 1] += 1
            tuples[q + 1] -= 1
    cross, cuttable, total, bad = [], [], 0, 0
    for b in range(n + 1):
        total += nbytes[b]
        bad += tuples[b]
        cross.append(total)
        cuttable.append(bad == 0)
    return cross, cuttable

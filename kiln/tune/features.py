"""Features of a candidate for the cost model: its knob values and what its lowered loops look like.

The config alone says which choices were made; the loop program says what they amount to (how
much runs in parallel and per task, how long the vectorized and innermost loops are, how much is
loaded, stored and computed, how many bound checks remain), which is what time depends on.
Counts are weighted by trip counts and log-scaled, so kernels of different sizes stay comparable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from kiln.ir.dtype import to_numpy
from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.functor import walk
from kiln.topi.knobs import KnobSpace

LOOP_FEATURES = ("loops", "depth", "parallel_loops", "parallel_extent", "work_per_task", "vector_loops",
                 "vector_extent", "unrolled_loops", "unrolled_extent", "innermost_max", "innermost_mean",
                 "stores", "loads", "arith", "guards", "allocs", "bytes", "intensity", "trips")


@dataclass
class _Acc:
    loops: int = 0
    depth: int = 0
    parallel: list[int] = field(default_factory=list)
    vector: list[int] = field(default_factory=list)
    unrolled: list[int] = field(default_factory=list)
    innermost: list[int] = field(default_factory=list)
    stores: float = 0.0
    loads: float = 0.0
    arith: float = 0.0
    guards: float = 0.0
    allocs: int = 0
    trips: float = 0.0


def _extent(loop: S.For) -> int:
    return loop.extent.value if isinstance(loop.extent, E.IntImm) else 1


def _expr_counts(e: E.PrimExpr) -> tuple[int, int]:
    loads = arith = 0
    for x in walk(e):
        if isinstance(x, E.BufferLoad):
            loads += 1
        elif isinstance(x, (E.BinaryOp, E.Call, E.Select)):
            arith += 1
    return loads, arith


def _visit(s: S.Stmt, trips: float, depth: int, acc: _Acc) -> bool:
    """Accumulate the statement's features; returns whether it contains a loop."""
    if isinstance(s, S.For):
        n = _extent(s)
        acc.loops += 1
        acc.depth = max(acc.depth, depth + 1)
        {S.ForKind.PARALLEL: acc.parallel, S.ForKind.VECTORIZED: acc.vector,
         S.ForKind.UNROLLED: acc.unrolled}.get(s.kind, []).append(n)
        if not _visit(s.body, trips * n, depth + 1, acc):
            acc.innermost.append(n)
        return True
    if isinstance(s, S.SeqStmt):
        return any([_visit(x, trips, depth, acc) for x in s.stmts])
    if isinstance(s, S.IfThenElse):
        acc.guards += trips
        inner = _visit(s.then_case, trips, depth, acc)
        return (s.else_case is not None and _visit(s.else_case, trips, depth, acc)) or inner
    if isinstance(s, (S.LetStmt, S.Allocate)):
        acc.allocs += isinstance(s, S.Allocate)
        return _visit(s.body, trips, depth, acc)
    if isinstance(s, S.BufferStore):
        loads, arith = _expr_counts(s.value)
        acc.stores += trips
        acc.loads += loads * trips
        acc.arith += arith * trips
        acc.trips += trips
    elif isinstance(s, S.Evaluate):
        acc.arith += trips
    return False


def _log(x: float) -> float:
    return math.log2(1.0 + max(x, 0.0))


def loop_features(func: S.PrimFunc) -> np.ndarray:
    acc = _Acc()
    _visit(func.body, 1.0, 0, acc)
    nbytes = 0
    for p in func.params:
        if isinstance(p, S.Buffer):
            size = math.prod(d.value if isinstance(d, E.IntImm) else 1 for d in p.shape)
            nbytes += size * np.dtype(to_numpy(p.dtype)).itemsize
    par = math.prod(acc.parallel) if acc.parallel else 1
    vals = [acc.loops, acc.depth, len(acc.parallel), _log(par), _log(acc.trips / par), len(acc.vector),
            _log(sum(acc.vector)), len(acc.unrolled), _log(sum(acc.unrolled)), _log(max(acc.innermost, default=0)),
            _log(float(np.mean(acc.innermost)) if acc.innermost else 0.0), _log(acc.stores), _log(acc.loads),
            _log(acc.arith), _log(acc.guards), acc.allocs, _log(nbytes), acc.arith / max(nbytes, 1), _log(acc.trips)]
    return np.asarray(vals, dtype=np.float64)


def config_features(config: Mapping[str, object], space: KnobSpace) -> np.ndarray:
    """One number per knob of the space: log2 of a positive integer value, else the choice's index."""
    out = []
    for name, (choices, default) in space.knobs.items():
        v = config.get(name, default)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            out.append(math.log2(v))
        else:
            out.append(float(choices.index(v)) if v in choices else -1.0)
    return np.asarray(out, dtype=np.float64)


def features(config: Mapping[str, object], space: KnobSpace, func: S.PrimFunc | None) -> np.ndarray:
    """The candidate's feature vector (loop features are -1 when it could not be lowered)."""
    loops = loop_features(func) if func is not None else np.full(len(LOOP_FEATURES), -1.0)
    return np.concatenate([config_features(config, space), loops])

"""Bound inference: the iteration domain of every stage, its loop extents and root indices.

A root stage covers its whole domain. A compute_at stage P attached at loop `a` of stage C covers
the region of P that is read inside `a`: the union, over every read of P by a stage inside that
loop, of the read index's interval when the loops inside `a` range over their extents and the
loops around it are fixed. Stages are processed after their readers and their attach stage, so
those readers' domains are known. A region that is not affine (or has no static size while the
whole domain has one) falls back to the whole domain; a region that may reach outside the
domain (a consumer's overshooting split) guards the producer's stores.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.te.bound import Interval, bound, canon, const_value, union
from kiln.te.schedule import Fuse, Schedule, Split, Stage
from kiln.te.tensor import ComputeOp, IterVar, Range
from kiln.tir.arith import simplify
from kiln.tir.expr import FloorDiv, FloorMod, IntImm, PrimExpr, ProducerLoad, Var
from kiln.tir.functor import substitute, walk


def _readers(sched: Schedule, live: Sequence[Stage], bodies) -> dict[Stage, list[Stage]]:
    readers: dict[Stage, list[Stage]] = {st: [] for st in live}
    for x in live:
        if isinstance(x.op, ComputeOp):
            tensors = [n.producer for b in bodies[x] for n in walk(b) if isinstance(n, ProducerLoad)]
        else:
            tensors = list(x.op.inputs)
        for t in tensors:
            p = sched.stage_map.get(t.op)
            if p in readers and x not in readers[p]:
                readers[p].append(x)
    return readers


def _inside(x: Stage, c: Stage, pos: int) -> bool:
    """Whether stage x runs inside loop number `pos` of stage c (or is c itself)."""
    while x is not c:
        if x.attach_type != "scope":
            return False
        if x.attach_stage is c:
            return c._leaf_pos(x.attach_ivar) >= pos
        x = x.attach_stage
    return True


def pass_down(stage: Stage, root_ext: dict[IterVar, PrimExpr]) -> tuple[dict[IterVar, PrimExpr], list[Split]]:
    """Extents of all of a stage's IterVars from its root extents, and the splits whose extent the
    loops overshoot (they need a guard)."""
    ext = dict(root_ext)
    inexact: list[Split] = []
    for rel in stage.relations:
        if isinstance(rel, Fuse):
            ext[rel.fused] = canon(ext[rel.outer] * ext[rel.inner])
            continue
        n = ext[rel.parent]
        nc = const_value(n)
        if rel.factor is not None:
            f = const_value(rel.factor)
            if nc is not None and f is not None and f >= nc:
                inner, outer = n, IntImm(1, n.dtype)
            else:
                inner, outer = rel.factor, canon(FloorDiv(n + rel.factor - 1, rel.factor))
        else:
            outer, inner = rel.nparts, canon(FloorDiv(n + rel.nparts - 1, rel.nparts))
        ext[rel.outer], ext[rel.inner] = outer, inner
        if const_value(outer * inner - n) != 0:
            inexact.append(rel)
    return ext, inexact


def pass_up(stage: Stage, ext: dict[IterVar, PrimExpr], inexact: list[Split]
            ) -> tuple[dict[IterVar, PrimExpr], list[tuple[PrimExpr, str]]]:
    """Each IterVar's index (from 0) in terms of the leaf loop variables, and the guards
    (condition, "data" | "reduce") that overshooting splits need."""
    val: dict[IterVar, PrimExpr] = {iv: iv.var for iv in stage.leaf_iter_vars}
    conds: list[tuple[PrimExpr, str]] = []
    for rel in reversed(stage.relations):
        if isinstance(rel, Fuse):
            f, n = val[rel.fused], ext[rel.inner]
            val[rel.outer], val[rel.inner] = canon(FloorDiv(f, n)), canon(FloorMod(f, n))
            continue
        val[rel.parent] = canon(val[rel.outer] * ext[rel.inner] + val[rel.inner])
        if rel in inexact:
            conds.append((val[rel.parent] < ext[rel.parent], rel.parent.kind))
    return val, conds


def _flattened(i: PrimExpr) -> PrimExpr:
    """An index that recombines a fused loop, (f // w) * w + f % w, as f itself: bounded term by term, it
    would span all of its rows (a pointwise conv's pixels read through a fused row and column)."""
    if not any(isinstance(n, FloorMod) for n in walk(i)):
        return i
    return canon(simplify(i))


class _Inference:
    def __init__(self, sched: Schedule, live: Sequence[Stage], bodies):
        self.sched, self.bodies = sched, bodies
        self.readers = _readers(sched, live, bodies)
        self.ranges: dict[Stage, dict[IterVar, Range]] = {}
        self.ext: dict[Stage, dict[IterVar, PrimExpr]] = {}
        self.vals: dict[Stage, dict[IterVar, PrimExpr]] = {}
        self.conds: dict[Stage, list[tuple[PrimExpr, str]]] = {}
        self.guards: dict[Stage, list[PrimExpr]] = {}

    def order(self) -> list[Stage]:
        out: list[Stage] = []
        seen: set[Stage] = set()

        def visit(st: Stage) -> None:
            if st in seen:
                return
            seen.add(st)
            for r in self.readers[st]:
                visit(r)
            if st.attach_type == "scope":
                if st.attach_stage not in self.readers:
                    raise ValueError(f"{st.op.name} is computed at {st.attach_stage.op.name}, which is not lowered "
                                     "as a loop nest (inlined, or not part of this function)")
                visit(st.attach_stage)
            out.append(st)

        for st in self.readers:
            visit(st)
        return out

    def _dom(self, fixed: set[Var]) -> dict[Var, Interval]:
        return {iv.var: (IntImm(0, iv.var.dtype), canon(ext[iv] - 1))
                for st, ext in self.ext.items() for iv in st.leaf_iter_vars if iv.var not in fixed}

    def _region(self, p: Stage) -> tuple[dict[IterVar, Range], list[tuple[IterVar, bool, bool]]]:
        c, a = p.attach_stage, p.attach_ivar
        pos = c._leaf_pos(a)
        fixed: set[Var] = set()
        s, iv = c, a
        while True:
            k = s._leaf_pos(iv)
            fixed |= {leaf.var for leaf in s.leaf_iter_vars[:k + 1]}
            if s.attach_type != "scope":
                break
            s, iv = s.attach_stage, s.attach_ivar
        dom = self._dom(fixed)
        axis = p.op.axis
        regions: list[Interval | None] = [None] * len(axis)
        unknown = [False] * len(axis)
        for x in self.readers[p]:
            if not _inside(x, c, pos):
                raise ValueError(f"{p.op.name} is computed at {c.op.name}.{a.var.name}, but {x.op.name} reads it "
                                 "outside that loop")
            rootmap = {iv.var: canon(self.ranges[x][iv].min + self.vals[x][iv]) for iv in x.root_iter_vars}
            loads = [n for b in self.bodies[x] for n in walk(b)
                     if isinstance(n, ProducerLoad) and self.sched.stage_map.get(n.producer.op) is p]
            for load in loads:
                for d, i in enumerate(load.indices):
                    b = bound(_flattened(substitute(i, rootmap)), dom)
                    if b is None:
                        unknown[d] = True
                    elif regions[d] is None:
                        regions[d] = b
                    else:
                        regions[d] = union(regions[d], b)
        ranges: dict[IterVar, Range] = {iv: iv.dom for iv in p.root_iter_vars}
        needs = []
        dom_all = self._dom(set())
        for d, iv in enumerate(axis):
            r = regions[d]
            full = iv.dom.extent
            if r is None or unknown[d]:
                continue
            ext = canon(r[1] - r[0] + 1)
            if const_value(ext) is None and const_value(full) is not None:
                continue
            ranges[iv] = Range(r[0], ext)
            lo, hi = bound(r[0], dom_all), bound(canon(r[0] + ext - 1), dom_all)
            low = None if lo is None else const_value(lo[0])
            high = None if hi is None else const_value(full - 1 - hi[1])
            needs.append((iv, low is None or low < 0, high is None or high < 0))
        return ranges, needs

    def run(self) -> None:
        for st in self.order():
            if not isinstance(st.op, ComputeOp):
                self.ranges[st] = {}
                continue
            needs = []
            if st.attach_type == "scope":
                self.ranges[st], needs = self._region(st)
            else:
                self.ranges[st] = {iv: iv.dom for iv in st.root_iter_vars}
            ext, inexact = pass_down(st, {iv: r.extent for iv, r in self.ranges[st].items()})
            self.ext[st] = ext
            self.vals[st], self.conds[st] = pass_up(st, ext, inexact)
            guards = []
            for iv, low, high in needs:
                v = canon(self.ranges[st][iv].min + self.vals[st][iv])
                guards += ([v >= 0] if low else []) + ([v < iv.dom.extent] if high else [])
            self.guards[st] = guards


def infer(sched: Schedule, live: Sequence[Stage], bodies):
    """(ranges, extents, root indices, split guards, domain guards) for every stage in `live`."""
    inf = _Inference(sched, live, bodies)
    inf.run()
    return inf.ranges, inf.ext, inf.vals, inf.conds, inf.guards

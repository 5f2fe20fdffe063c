"""Schedules: how a te compute graph becomes loops, kept apart from what it computes.

A Schedule holds one Stage per operation reachable from the outputs (placeholders excluded).
A Stage records its loop structure as relations over IterVars (Split, Fuse) and an ordered list
of leaf IterVars (the loops, outermost first), each leaf's ForKind, and where the stage is
computed: at the root, inlined into its consumers, or inside a consumer's loop (compute_at).
Nothing is lowered here; `kiln.te.lower` reads these records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kiln.te.bound import canon
from kiln.te.tensor import ComputeOp, ExternOp, IterVar, Operation, PlaceholderOp, Range, Tensor, compute
from kiln.tir.expr import PrimExpr, ProducerLoad, Reduce, Var, const
from kiln.tir.functor import map_expr, walk
from kiln.tir.stmt import ForKind


@dataclass(frozen=True, eq=False)
class Split:
    """parent = outer * extent(inner) + inner; exactly one of factor / nparts is set."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: PrimExpr | None
    nparts: PrimExpr | None


@dataclass(frozen=True, eq=False)
class Fuse:
    """fused = outer * extent(inner) + inner."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


def _derived(parent: IterVar, suffix: str, extent: PrimExpr) -> IterVar:
    # dom is informative: lowering recomputes extents from the root domains (bound inference)
    return IterVar(Var(f"{parent.var.name}_{suffix}", parent.var.dtype), Range(const(0), extent), parent.kind)


def _ceildiv(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return canon((a + b - 1) // b)


class Stage:
    """The loop structure and placement of one operation."""

    def __init__(self, op: Operation):
        self.op = op  # cache_read/cache_write replace it; the schedule maps old ops here too
        self.relations: list[Split | Fuse] = []
        self.kinds: dict[IterVar, ForKind] = {}
        self.unroll_hints: set[IterVar] = set()  # serial loops the C compiler is asked to unroll (unroll_hint)
        self.attach_type = "root"  # "root" | "inline" | "scope"
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope: str | None = None  # requested by cache_read/cache_write
        self._reset_leaves()

    def _reset_leaves(self) -> None:
        op = self.op
        self.leaf_iter_vars: list[IterVar] = (list(op.axis) + list(op.reduce_axis)) if isinstance(op, ComputeOp) else []

    def __repr__(self) -> str:
        return f"Stage({self.op.name})"

    @property
    def root_iter_vars(self) -> list[IterVar]:
        return list(self.op.axis) + list(self.op.reduce_axis) if isinstance(self.op, ComputeOp) else []

    def _leaf_pos(self, iv: IterVar) -> int:
        for k, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return k
        raise ValueError(f"{iv} is not a loop of stage {self.op.name} (leaves: {self.leaf_iter_vars})")

    def split(self, parent: IterVar, factor=None, nparts=None) -> tuple[IterVar, IterVar]:
        """Split a loop in two; an extent that the factor does not divide is guarded when lowered."""
        if (factor is None) == (nparts is None):
            raise ValueError("split needs exactly one of factor= or nparts=")
        pos = self._leaf_pos(parent)
        ext = parent.dom.extent
        if factor is not None:
            factor = const(factor)
            outer, inner = _derived(parent, "outer", _ceildiv(ext, factor)), _derived(parent, "inner", factor)
        else:
            nparts = const(nparts)
            outer, inner = _derived(parent, "outer", nparts), _derived(parent, "inner", _ceildiv(ext, nparts))
        self.relations.append(Split(parent, outer, inner, factor, nparts))
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        return outer, inner

    def tile(self, x: IterVar, y: IterVar, x_factor, y_factor) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *axes: IterVar) -> IterVar:
        """Fuse consecutive loops (outermost first) into one."""
        if not axes:
            raise ValueError("fuse needs at least one axis")
        pos = [self._leaf_pos(a) for a in axes]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            raise ValueError(f"fuse: {list(axes)} are not consecutive loops in order")
        if len({a.kind for a in axes}) > 1:
            raise ValueError("fuse: cannot fuse a data-parallel loop with a reduction loop")
        fused = axes[0]
        for inner in axes[1:]:
            var = Var(f"{fused.var.name}_{inner.var.name}_fused", fused.var.dtype)
            new = IterVar(var, Range(const(0), canon(fused.dom.extent * inner.dom.extent)), fused.kind)
            self.relations.append(Fuse(fused, inner, new))
            fused = new
        self.leaf_iter_vars[pos[0]:pos[-1] + 1] = [fused]
        return fused

    def reorder(self, *axes: IterVar) -> None:
        """The given loops take the positions they occupy now, in the given order."""
        pos = [self._leaf_pos(a) for a in axes]
        if len(set(pos)) != len(pos):
            raise ValueError("reorder: an axis is given twice")
        for p, a in zip(sorted(pos), axes):
            self.leaf_iter_vars[p] = a

    def _set_kind(self, iv: IterVar, kind: ForKind) -> None:
        self._leaf_pos(iv)
        self.kinds[iv] = kind

    def vectorize(self, iv: IterVar) -> None:
        self._set_kind(iv, ForKind.VECTORIZED)

    def unroll(self, iv: IterVar) -> None:
        self._set_kind(iv, ForKind.UNROLLED)

    def parallel(self, iv: IterVar) -> None:
        self._set_kind(iv, ForKind.PARALLEL)

    def unroll_hint(self, iv: IterVar) -> None:
        """Leave the loop serial in the IR, and ask the C compiler to unroll it (`#pragma GCC unroll`):
        the generated C stays one body long, while gcc's unrolled code has constant offsets and no loop
        step per iteration. `unroll` copies the body in the IR instead, which a loop whose index
        decides something the simplifier must see (a register tile's accumulator) needs."""
        self._leaf_pos(iv)
        self.unroll_hints.add(iv)

    def compute_inline(self) -> None:
        """Substitute this stage's body into its consumers (injective computes only)."""
        op = self.op
        if not isinstance(op, ComputeOp) or any(isinstance(b, Reduce) for b in op.body) or op.num_outputs != 1:
            raise ValueError(f"compute_inline: {op.name} is not a single-output injective compute")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None

    def compute_at(self, parent: Stage, ivar: IterVar) -> None:
        """Compute this stage inside `parent`'s loop `ivar`, over the region that loop's body reads."""
        if not isinstance(self.op, ComputeOp):
            raise ValueError(f"compute_at: {self.op.name} is not a compute")
        parent._leaf_pos(ivar)
        if parent is self:
            raise ValueError("compute_at: a stage cannot be computed inside itself")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, ivar

    def compute_root(self) -> None:
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None


def reads(op: Operation) -> list[Tensor]:
    """Tensors an operation reads, in first-read order (one per (op, value_index))."""
    if isinstance(op, ExternOp):
        return list(op.inputs)
    if not isinstance(op, ComputeOp):
        return []
    out, seen = [], set()
    for b in op.body:
        for x in walk(b):
            if isinstance(x, ProducerLoad) and (x.producer.op, x.producer.value_index) not in seen:
                seen.add((x.producer.op, x.producer.value_index))
                out.append(x.producer)
    return out


def _post_order(outputs: Sequence[Tensor], stop: set[Operation] = frozenset()) -> list[Operation]:
    """Operations reachable from `outputs`, producers before consumers."""
    order: list[Operation] = []
    seen: set[Operation] = set()

    def visit(op: Operation) -> None:
        if op in seen:
            return
        seen.add(op)
        if op not in stop:
            for t in reads(op):
                visit(t.op)
        order.append(op)

    for t in outputs:
        visit(t.op)
    return order


def _replace_reads(op: ComputeOp, old: Tensor, new: Tensor) -> ComputeOp:
    def f(x):
        if isinstance(x, ProducerLoad) and x.producer.op is old.op and x.producer.value_index == old.value_index:
            return ProducerLoad(new, x.indices)
        return None

    return ComputeOp(op.name, op.axis, tuple(map_expr(b, f) for b in op.body), op.tag, op.attrs)


class Schedule:
    """Stages for every operation reachable from `outputs`; `s[T]` is T's stage."""

    def __init__(self, outputs: Sequence[Tensor]):
        self.outputs = tuple(outputs)
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        for op in _post_order(self.outputs):
            if not isinstance(op, PlaceholderOp):
                self._add(Stage(op), len(self.stages))

    def _add(self, stage: Stage, pos: int) -> Stage:
        self.stages.insert(pos, stage)
        self.stage_map[stage.op] = stage
        return stage

    def __getitem__(self, t: Tensor | Operation) -> Stage:
        op = t.op if isinstance(t, Tensor) else t
        if op not in self.stage_map:
            raise KeyError(f"{op.name} has no stage in this schedule (a placeholder, or not reachable)")
        return self.stage_map[op]

    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Tensor | Operation]) -> Tensor:
        """A copy of `tensor` that `readers` read instead of it (schedule it, e.g. compute_at)."""
        cache = compute(tensor.shape, lambda *i: tensor(*i), name=f"{tensor.name}_{scope}")
        stages = [self[r] for r in readers]
        for st in stages:
            if not isinstance(st.op, ComputeOp):
                raise ValueError(f"cache_read: reader {st.op.name} is not a compute")
            st.op = _replace_reads(st.op, tensor, cache)
            self.stage_map[st.op] = st
        pos = min(self.stages.index(st) for st in stages)
        self._add(Stage(cache.op), pos).scope = scope
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor | tuple[Tensor, ...]:
        """Compute `tensor` into a new stage (returned) that the old stage then copies out.
        Call before scheduling `tensor`'s stage: its loops are replaced."""
        st = self[tensor]
        op = st.op
        if not isinstance(op, ComputeOp) or st.relations:
            raise ValueError(f"cache_write: {op.name} must be an unscheduled compute")
        cache_op = ComputeOp(f"{op.name}_{scope}", op.axis, op.body, op.tag, op.attrs)
        axis = tuple(IterVar(Var(iv.var.name, iv.var.dtype), iv.dom) for iv in op.axis)
        copies = tuple(cache_op.output(k)(*(iv.var for iv in axis)) for k in range(op.num_outputs))
        st.op = ComputeOp(op.name, axis, copies, op.tag, op.attrs)
        st.kinds = {}
        st.unroll_hints = set()
        st._reset_leaves()
        self.stage_map[st.op] = st
        self._add(Stage(cache_op), self.stages.index(st)).scope = scope
        outs = tuple(cache_op.output(k) for k in range(cache_op.num_outputs))
        return outs[0] if len(outs) == 1 else outs


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    return Schedule([outputs] if isinstance(outputs, Tensor) else list(outputs))

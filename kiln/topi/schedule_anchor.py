"""What the per-anchor default schedules share: find a group's one reduction (the anchor) and its
elementwise epilogue, inline the injective rest, and pick tile sizes that divide when they can.

The anchor schedules compute the reduction inside a tile loop of the output stage (a small local
accumulator) and store through the fused epilogue once per element; that is only valid as fast
code when the output reads the reduction at its own index, which `anchor_stages` checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kiln import tir
from kiln.target import Target
from kiln.te.bound import canon
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import ComputeOp, ExternOp, IterVar, Operation, Tensor
from kiln.tir.expr import ProducerLoad, Select
from kiln.tir.functor import map_expr, substitute, walk
from kiln.topi.schedule_generic import PARALLEL_MIN_ELEMENTS, loop_nest


def static(e: tir.PrimExpr) -> int | None:
    return e.value if isinstance(e, tir.IntImm) else None


def uses(e: tir.PrimExpr, v: tir.Var) -> bool:
    return any(x is v for x in walk(e))


def block(extent: tir.PrimExpr, limit: int) -> int:
    """A tile size <= limit: the whole extent when it fits, else the largest divisor that is at least
    half the limit, else the limit itself (the last tile is then guarded)."""
    n = static(extent)
    if n is not None and n <= limit:
        return max(n, 1)
    if n is not None:
        d = max(k for k in range(1, limit + 1) if n % k == 0)
        if 2 * d > limit:
            return d
    return limit


def is_reduction(st: Stage) -> bool:
    return isinstance(st.op, ComputeOp) and bool(st.op.reduce_axis)


def inline_injective(s: Schedule, outputs: Sequence[Tensor], keep=lambda st: False) -> list[Stage]:
    """Inline every single-output injective compute that is not an output, not read by an extern
    and not kept; returns the stages left to schedule (producers first)."""
    out_ops = {t.op for t in outputs}
    extern_reads = {t.op for st in s.stages if isinstance(st.op, ExternOp) for t in st.op.inputs}
    rest = []
    for st in s.stages:
        op = st.op
        if (isinstance(op, ComputeOp) and op not in out_ops and op not in extern_reads and not op.reduce_axis
                and op.num_outputs == 1 and not keep(st)):
            st.compute_inline()
        else:
            rest.append(st)
    return rest


def expand(s: Schedule, e: tir.PrimExpr) -> tir.PrimExpr:
    """`e` with the bodies of inlined stages substituted for their loads (as lowering will)."""
    def f(x):
        if isinstance(x, ProducerLoad):
            st = s.stage_map.get(x.producer.op)
            if st is not None and st.attach_type == "inline":
                body = expand(s, st.op.body[0])
                return substitute(body, {iv.var: i for iv, i in zip(st.op.axis, x.indices)})
        return None

    return map_expr(e, f)


def loads_of(s: Schedule, st: Stage, op: Operation | None = None) -> list[ProducerLoad]:
    """The loads in st's body once inlined stages are substituted (of `op` only, when given)."""
    return [x for b in st.op.body for x in walk(expand(s, b))
            if isinstance(x, ProducerLoad) and (op is None or x.producer.op is op)]


def is_pad(st: Stage) -> bool:
    """A padding compute (a Select on bounds): worth materializing once rather than re-testing the
    bounds at every tap of a window. A Select on data (elu, leaky relu: `v < 0 ? ... : v`) is not one:
    kept at the root after a conv, it would read the accumulator outside the tile that computes it."""
    body = st.op.body[0] if isinstance(st.op, ComputeOp) else None
    return isinstance(body, Select) and not any(isinstance(x, ProducerLoad) for x in walk(body.cond))


def materialize(st: Stage, target: Target) -> None:
    """Compute a producer once at the root, with the generic parallel/vector loop nest."""
    st.compute_root()
    loop_nest(st, target)


@dataclass
class Anchor:
    sched: Schedule
    red: Stage  # the reduction (conv_acc, matmul_acc, ...)
    out: Stage  # the single output: the reduction's finish and fused epilogue, inlined
    others: list[Stage]  # every other stage left at the root (producers of the reduction)


def anchor_stages(outputs: Sequence[Tensor], keep=lambda st: False) -> Anchor | None:
    """The group as one reduction plus one elementwise output over the same index space, or None
    (several outputs or reductions, an epilogue that reshapes): the caller then falls back."""
    if len(outputs) != 1:
        return None
    s = create_schedule(outputs)
    reds = [st for st in s.stages if is_reduction(st)]
    if len(reds) != 1 or reds[0].op.num_outputs != 1 or reds[0].op is outputs[0].op:
        return None
    red, out = reds[0], s[outputs[0]]
    rest = inline_injective(s, outputs, keep=lambda st: st is red or keep(st))
    if any(isinstance(st.op, ExternOp) for st in rest) or len(out.op.axis) != len(red.op.axis):
        return None
    pixels = dict(red.op.attrs or {}).get("pixels")
    for load in loads_of(s, out, red.op):
        if not all(_same_index(canon(i), iv) for i, iv in zip(load.indices, out.op.axis)) and \
                not (pixels and _pixel_index(load.indices, out.op.axis, pixels)):
            return None
    return Anchor(s, red, out, [st for st in rest if st is not red and st is not out])


def _pixel_index(indices: Sequence[tir.PrimExpr], axes: Sequence[IterVar], width: int) -> bool:
    """Whether a 5-D load reads (n, m, 0, y * width + x, c) at the loops (n, m, y, x, c): a reduction over all
    pixels as one axis (a pointwise conv's)."""
    if len(indices) != 5 or len(axes) != 5:
        return False
    units = {iv.var: tir.const(0, iv.var.dtype) for iv in axes[2:4] if static(iv.dom.extent) == 1}
    flat = canon(substitute(indices[3] - (axes[2].var * width + axes[3].var), units))
    return (all(_same_index(canon(indices[d]), axes[d]) for d in (0, 1, 4)) and static(canon(indices[2])) == 0
            and static(flat) == 0)


def _same_index(i: tir.PrimExpr, iv: IterVar) -> bool:
    """Whether index i of a load is the loop iv itself (a unit dim may be read at 0: broadcasting)."""
    return i is iv.var or (static(i) == 0 and static(iv.dom.extent) == 1)


def parallel_axes(axes: Sequence[IterVar]) -> list[IterVar]:
    """The outer loops parallel_outer fuses: leading loops of symbolic extent (the batch) stay serial
    outside: fused, bound inference could not prove a compute_at region inside them in bounds, and would
    guard every store."""
    axes = list(axes)
    while len(axes) > 1 and static(axes[0].dom.extent) is None:
        axes.pop(0)
    return axes


def parallel_outer(st: Stage, axes: Sequence[IterVar], work: int | None) -> IterVar:
    """Fuse the outer loops (parallel_axes) into one and run it in parallel when there is enough work."""
    axes = parallel_axes(axes)
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    if work is None or work >= PARALLEL_MIN_ELEMENTS:
        st.parallel(fused)
    return fused


def data_size(st: Stage, reduce_too: bool = False) -> int | None:
    """Iterations of the stage's loops (None when symbolic): decides whether to go parallel."""
    n = 1
    for iv in list(st.op.axis) + (list(st.op.reduce_axis) if reduce_too else []):
        ext = static(iv.dom.extent)
        if ext is None:
            return None
        n *= ext
    return n


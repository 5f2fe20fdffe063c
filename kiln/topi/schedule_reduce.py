"""Default x86 schedule of groups built around reductions: reduce_*, arg-reductions, pooling, global
pools, softmax, normalizations.

gcc does not vectorize a float reduction without reassociating it (we do not allow -ffast-math),
so a reduction is vectorized across a data axis instead: when the inputs are contiguous along one
of the output's axes (pooling windows along the output columns, a reduction over a leading axis),
the reduce loops go outside a vectorized run of that axis. Otherwise (a reduction over the
contiguous axis: softmax, layer norm, global pools) the reduce loops stay innermost, reading
contiguously, and the data axes run in parallel. Padding is computed once, not tested per tap.
The run length of the vectorized axis is a knob (kiln.topi.knobs); RUN is its default.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.target import Target
from kiln.te.bound import canon
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import IterVar, Tensor
from kiln.topi.knobs import knob
from kiln.topi.schedule_anchor import (
    block,
    data_size,
    inline_injective,
    is_pad,
    is_reduction,
    loads_of,
    materialize,
    parallel_outer,
    static,
    uses,
)
from kiln.topi.schedule_generic import VECTOR, loop_nest

RUN = 64  # elements of the vectorized axis per parallel task


def vector_axis(s: Schedule, st: Stage) -> IterVar | None:
    """The innermost data axis of `st` that every input read using it has in its last index."""
    loads = [[canon(i) for i in ld.indices] for ld in loads_of(s, st)]
    for iv in reversed(st.op.axis):
        ext = static(iv.dom.extent)
        if ext is not None and ext < VECTOR:
            continue
        if all(uses(idx[-1], iv.var) for idx in loads if any(uses(i, iv.var) for i in idx)):
            return iv
        return None
    return None


def reduce_nest(s: Schedule, st: Stage, target: Target) -> None:
    v = vector_axis(s, st)
    if v is None:
        loop_nest(st, target)
        return
    others = [iv for iv in st.op.axis if iv is not v]
    run = knob("reduce.run", (16, 32, 64, 128, 256, 512), RUN)
    vo, vi = st.split(v, block(v.dom.extent, run))
    st.reorder(*others, vo, *st.op.reduce_axis, vi)
    parallel_outer(st, [*others, vo], data_size(st, reduce_too=True))
    st.vectorize(vi)


def schedule_reduce(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    s = create_schedule(outputs)
    if not any(is_reduction(st) for st in s.stages):
        return None
    for st in inline_injective(s, outputs, keep=is_pad):
        if is_reduction(st):
            reduce_nest(s, st, target)
        elif is_pad(st):
            materialize(st, target)
        else:
            loop_nest(st, target)
    return s

"""x86 schedule of a layout_transform group (the edges of AlterOpLayout's blocked regions).

The generic schedule fuses every loop into one, which costs a floor division and modulo per axis
per element; a transform is pure data movement, so that index arithmetic is most of its time.
Here only the outer axes are fused (one division per row) and run in parallel; the column loop
stays plain and the innermost axis is a vector (8 or more) or unrolled (a small channel block).
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import ComputeOp, Tensor
from kiln.topi.schedule_anchor import data_size, inline_injective, parallel_outer, static
from kiln.topi.schedule_generic import VECTOR

UNROLL_MAX = 16  # an innermost axis up to this long is unrolled when it is too short to vectorize


def schedule_transform(outputs: Sequence[Tensor]) -> Schedule | None:
    if len(outputs) != 1 or not isinstance(outputs[0].op, ComputeOp) or outputs[0].op.name != "layout_transform":
        return None
    s = create_schedule(outputs)
    rest = inline_injective(s, outputs)
    out = s[outputs[0]]
    if rest != [out] or len(out.op.axis) < 3:
        return None
    row_nest(out)
    return s


def row_nest(st: Stage) -> None:
    """Outer axes fused and parallel (one division per row), the column loop plain, the innermost
    axis a vector or unrolled: for data movement such as transforms and padded copies."""
    *outer, col, inner = st.op.axis
    n = static(inner.dom.extent)
    if n is not None and n >= VECTOR and n % VECTOR == 0:
        io, ii = st.split(inner, VECTOR)
        st.reorder(*outer, col, io, ii)
        st.vectorize(ii)
    elif n is not None and n <= UNROLL_MAX:
        st.unroll(inner)
    parallel_outer(st, outer, data_size(st))

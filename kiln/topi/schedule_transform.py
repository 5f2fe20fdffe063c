"""x86 schedule of a layout_transform group (the edges of AlterOpLayout's blocked regions).

The generic schedule fuses every loop into one, which costs a floor division and modulo per axis
per element; a transform is pure data movement, so that index arithmetic is most of its time.
Here only the outer axes are fused (one division per row) and run in parallel; the column loop
stays plain and the innermost axis is a vector (8 or more) or unrolled (a small channel block).
A transform out of a blocked layout (NCHW8c -> NCHW) or into one (NCHW -> NCHW8c) moves each pixel's
block whole instead, transposed in registers: see unblock_nest and block_nest.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.target import Target
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import ComputeOp, Tensor
from kiln.topi.schedule_anchor import data_size, inline_injective, parallel_outer, static
from kiln.topi.schedule_generic import VECTOR

UNROLL_MAX = 16  # an innermost axis up to this long is unrolled when it is too short to vectorize


def schedule_transform(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    if len(outputs) != 1 or not isinstance(outputs[0].op, ComputeOp) or outputs[0].op.name != "layout_transform":
        return None
    s = create_schedule(outputs)
    rest = inline_injective(s, outputs)
    out = s[outputs[0]]
    if rest != [out] or len(out.op.axis) < 3:
        return None
    attrs = dict(out.op.attrs or {})
    if "unblock" in attrs and unblock_nest(out, *attrs["unblock"]):
        return s
    if "block" in attrs and block_nest(out):
        return s
    row_nest(out)
    return s


def block_nest(st: Stage) -> bool:
    """Into a blocked layout (NCHW -> NCHW8c: the output's innermost axis is a channel block read from
    whole channel planes): the columns a vector and the block unrolled inside it, so each vector step
    loads a column vector of every channel of the block and gcc interleaves them into whole pixels
    (an interleaved store group), where the block as the vector gathers each lane from another plane.
    16 channels of 112 x 112 alone: 2 threads 26.9 -> 21.8 us, 1 thread 59.8 -> 45.0 us. False (nothing
    done) when the block is long or the columns are not whole vectors."""
    *outer, col, inner = st.op.axis
    n, w = static(inner.dom.extent), static(col.dom.extent)
    if n is None or w is None or n > UNROLL_MAX or w % VECTOR:
        return False
    _block_in_column_vectors(st, outer, col, inner)
    return True


def unblock_nest(st: Stage, axis: int, block: int) -> bool:
    """Out of a blocked layout (NCHW8c -> NCHW: output axis `axis` is read as a block of `block` in
    the source's innermost axis): blocks of that axis outside, the columns a vector, the block's
    channels unrolled inside it. Each vector step then loads `block` whole pixel vectors and gcc
    transposes them in registers (an interleaved load group: permutes), where channels outside
    the columns read every value with a stride-8 gather. resnet-sized maps, 96 x 112 x 112 alone:
    2 threads 862 -> 153 us, 1 thread 1694 -> 344 us. False (nothing done) when the axis is the
    innermost one, the columns are not whole vectors, or the blocks do not divide the channels (21
    classes cropped from 3 blocks: bound inference makes the last block's channel loop of variable
    length, which cannot be unrolled inside the vector; the row nest keeps those)."""
    axes = list(st.op.axis)
    if axis >= len(axes) - 1:
        return False
    c, col = axes[axis], axes[-1]
    n, w = static(c.dom.extent), static(col.dom.extent)
    if n is None or w is None or n % block or w % VECTOR or block > UNROLL_MAX:
        return False
    co, ci = st.split(c, block)
    _block_in_column_vectors(st, [*axes[:axis], co, *axes[axis + 1:-1]], col, ci)
    return True


def _block_in_column_vectors(st: Stage, outer: list, col, block) -> None:
    """The nest block_nest and unblock_nest share: `outer` fused and parallel, then the columns `col` in
    vectors, the `block` axis unrolled inside each vector step."""
    xo, xi = st.split(col, VECTOR)
    st.reorder(*outer, xo, xi, block)
    st.vectorize(xi)
    st.unroll(block)
    parallel_outer(st, outer, data_size(st))


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

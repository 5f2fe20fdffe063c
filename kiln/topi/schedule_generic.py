"""Default schedules for any fused group: correct for every compute, parallel and vectorizable.

Injective producers are inlined into their consumers; every remaining stage runs its outer
data-parallel axes fused into a parallel loop and its innermost axis vectorized when its extent is
static: a row of up to WHOLE_ROW as one simd loop, a longer one split into vectors. Reductions keep
their reduce axes innermost. Target-specific schedules (x86 GEMM, conv) override this per anchor
operator. The vector width, the parallel threshold and the unrolling of the vector loop's parent are
knobs (kiln.topi.knobs): the constants below are their defaults, which the tuner may beat per workload.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln import tir
from kiln.target import Target
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import ComputeOp, ExternOp, Tensor
from kiln.topi.knobs import knob

VECTOR = 8  # float32 lanes of AVX2
PARALLEL_MIN_ELEMENTS = 1 << 14  # below this, OpenMP start-up costs more than it saves
# an innermost axis up to this long stays whole (one simd loop, with a remainder when the vector does
# not divide it) instead of split into vectors fused with the outer axes: its index then stays
# provably below its extent, so reshapes and transposes of it simplify (a 28-wide channel shuffle:
# 26 -> 0.35 ns/element), and the outer index is divided once per row, not once per vector
WHOLE_ROW = 64
PARALLEL_ROWS = 16  # a longer row is split into vectors; with this many rows they stay inside the row loop
NEVER_PARALLEL = 1 << 62


def _static(e: tir.PrimExpr) -> int | None:
    return e.value if isinstance(e, tir.IntImm) else None


def _size(stage: Stage) -> int | None:
    return _size_of(stage.op.axis)


def _size_of(axes) -> int | None:
    n = 1
    for iv in axes:
        ext = _static(iv.dom.extent)
        if ext is None:
            return None
        n *= ext
    return n


def schedule_generic(outputs: Sequence[Tensor], target: Target) -> Schedule:
    s = create_schedule(outputs)
    out_ops = {t.op for t in outputs}
    # a runtime-library function (ExternOp) reads its inputs from buffers: never inline those
    extern_reads = {t.op for st in s.stages if isinstance(st.op, ExternOp) for t in st.op.inputs}
    for stage in list(s.stages):
        op = stage.op
        if not isinstance(op, ComputeOp):
            continue
        if op not in out_ops and op not in extern_reads and not op.reduce_axis and op.num_outputs == 1:
            stage.compute_inline()
            continue
        loop_nest(stage, target)
    return s


def vector_lanes(target: Target) -> int:
    """float32 lanes of the target's widest vector: 16 with AVX-512 (an omp simd loop of 16 runs in zmm
    registers), else VECTOR. A sigmoid-times-x over 1.2M elements: 0.66 -> 0.46 ms with 16 on Zen 4,
    which runs a 512-bit op as two 256-bit halves but has half as many ops to issue."""
    return max(VECTOR, target.vector_bytes // 4)


def _default_vector(inner_ext: int | None, target: Target) -> int:
    """The target's lanes, or VECTOR where only VECTOR divides the row (no ragged last vector)."""
    lanes = vector_lanes(target)
    if inner_ext is not None and inner_ext % lanes and inner_ext % VECTOR == 0:
        return VECTOR
    return lanes


def loop_nest(stage: Stage, target: Target) -> None:
    axes = list(stage.op.axis) if isinstance(stage.op, ComputeOp) else []  # an extern has no loops
    inner = _static(axes[-1].dom.extent) if axes else None
    vector = knob("generic.vector", (1, 4, 8, 16, 32), _default_vector(inner, target))
    parallel_min = knob("generic.parallel_min", (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, NEVER_PARALLEL),
                        PARALLEL_MIN_ELEMENTS)
    unroll = knob("generic.unroll", (1, 2, 4), 1)
    if not axes:
        return
    size = _size(stage)
    reduce = bool(stage.op.reduce_axis)
    inner_ext = _static(axes[-1].dom.extent)
    vec = unrolled = None
    if not reduce and vector > 1 and inner_ext is not None and min(vector, VECTOR) <= inner_ext <= WHOLE_ROW:
        vec, axes = axes[-1], axes[:-1]  # a short row: one simd loop over it
        if len(axes) > 1 and (_size_of(axes[:-1]) or 0) >= PARALLEL_ROWS:
            axes = axes[:-1]  # and the next axis out a plain loop around it (W of a blocked W x c row)
    elif not reduce and vector > 1 and inner_ext is not None and inner_ext >= vector:
        outer_i, vec = stage.split(axes[-1], factor=vector)
        if unroll > 1 and inner_ext >= vector * unroll:
            outer_i, unrolled = stage.split(outer_i, factor=unroll)
        rows = _size_of(axes[:-1])
        # enough rows to share: the row's vectors stay a serial loop inside (one division per row)
        axes = axes[:-1] if rows is not None and rows >= PARALLEL_ROWS else axes[:-1] + [outer_i]
    if not axes:  # a 1-D row of at most WHOLE_ROW elements
        stage.vectorize(vec)
        return
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    if size is None or size >= parallel_min:
        stage.parallel(fused)
    if unrolled is not None:
        stage.unroll(unrolled)
    if vec is not None:
        stage.vectorize(vec)

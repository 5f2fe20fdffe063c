"""Default schedules for any fused group: correct for every compute, parallel and vectorizable.

Injective producers are inlined into their consumers; every remaining stage runs its outer
data-parallel axes fused and split so that the outer part is a parallel loop and a short inner
part is vectorized when its extent is static. Reductions keep their reduce axes innermost.
Target-specific schedules (x86 GEMM, conv) override this per anchor operator.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln import tir
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import ComputeOp, ExternOp, Tensor

VECTOR = 8  # float32 lanes of AVX2
PARALLEL_MIN_ELEMENTS = 1 << 14  # below this, OpenMP start-up costs more than it saves


def _static(e: tir.PrimExpr) -> int | None:
    return e.value if isinstance(e, tir.IntImm) else None


def _size(stage: Stage) -> int | None:
    n = 1
    for iv in stage.op.axis:
        ext = _static(iv.dom.extent)
        if ext is None:
            return None
        n *= ext
    return n


def schedule_generic(outputs: Sequence[Tensor]) -> Schedule:
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
        _loop_nest(stage)
    return s


def _loop_nest(stage: Stage) -> None:
    axes = list(stage.op.axis)
    if not axes:
        return
    size = _size(stage)
    reduce = bool(stage.op.reduce_axis)
    inner_ext = _static(axes[-1].dom.extent)
    vec = None
    if not reduce and inner_ext is not None and inner_ext >= VECTOR:
        outer_i, vec = stage.split(axes[-1], factor=VECTOR)
        axes = axes[:-1] + [outer_i]
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    if size is None or size >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(fused)
    if vec is not None:
        stage.vectorize(vec)

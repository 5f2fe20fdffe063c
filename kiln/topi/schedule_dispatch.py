"""Which default schedule a fused group gets: the one of its anchor operator (the conv, matmul or
reduction it is built around), else the generic one. An anchor schedule returns None when the group
is not of the shape it handles (several outputs, a reshaping epilogue), and the next choice runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln.te.schedule import Schedule
from kiln.te.tensor import Tensor
from kiln.topi.schedule_conv import schedule_conv
from kiln.topi.schedule_dense import schedule_dense
from kiln.topi.schedule_generic import schedule_generic
from kiln.topi.schedule_reduce import schedule_reduce

AnchorSchedule = Callable[[Sequence[Tensor]], "Schedule | None"]

ANCHOR_SCHEDULES: dict[str, AnchorSchedule] = {
    "nn.conv": schedule_conv,
    "linalg.mat_mul": schedule_dense,
    "linalg.gemm": schedule_dense,
}


def schedule_group(outputs: Sequence[Tensor], anchor_op_name: str | None) -> Schedule:
    rule = ANCHOR_SCHEDULES.get(anchor_op_name or "")
    for choice in ([rule] if rule else []) + [schedule_reduce]:
        s = choice(outputs)
        if s is not None:
            return s
    return schedule_generic(outputs)

"""Which default schedule a fused group gets: the one of its anchor operator (the conv, matmul or
reduction it is built around), else the generic one. An anchor schedule returns None when the group
is not of the shape it handles (several outputs, a reshaping epilogue), and the next choice runs.
Schedules are chosen by the target's kind (one table per kind) and get the target: its vector width,
registers, caches and cores decide tile sizes and parallel splits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln.errors import LoweringError
from kiln.target import Target
from kiln.te.schedule import Schedule
from kiln.te.tensor import Tensor
from kiln.topi.schedule_attention import schedule_attention
from kiln.topi.schedule_conv import schedule_conv
from kiln.topi.schedule_conv_nchwc import schedule_conv_nchwc
from kiln.topi.schedule_dense import schedule_dense, schedule_dense_packed
from kiln.topi.schedule_generic import schedule_generic
from kiln.topi.schedule_pool import schedule_pool
from kiln.topi.schedule_reduce import schedule_reduce
from kiln.topi.schedule_transform import schedule_transform
from kiln.topi.schedule_winograd import schedule_winograd_input, schedule_winograd_output
from kiln.topi.x86_attention import schedule_attention_blocked
from kiln.topi.x86_rowwise import schedule_rowwise

AnchorSchedule = Callable[[Sequence[Tensor], Target], "Schedule | None"]

# target kind -> anchor operator -> its schedule
ANCHOR_SCHEDULES: dict[str, dict[str, AnchorSchedule]] = {"c": {
    "nn.conv": schedule_conv,
    "nn.conv_integer": schedule_conv,
    "quant.qlinear_conv": schedule_conv,
    "nn.conv2d_nchwc": schedule_conv_nchwc,
    "nn.pool2d_layout": schedule_pool,
    "nn.winograd_input": schedule_winograd_input,
    "nn.winograd_output": schedule_winograd_output,
    "linalg.mat_mul": schedule_dense,
    "linalg.mat_mul_integer": schedule_dense,
    "linalg.gemm": schedule_dense,
    "linalg.dense_packed": schedule_dense_packed,
}}


def schedule_group(outputs: Sequence[Tensor], anchor_op_name: str | None, target: Target) -> Schedule:
    anchors = ANCHOR_SCHEDULES.get(target.kind)
    if anchors is None:
        raise LoweringError(f"no schedules for target kind {target.kind!r}; kinds with schedules: "
                            f"{', '.join(ANCHOR_SCHEDULES)}")
    rule = anchors.get(anchor_op_name or "")
    fallbacks = [schedule_attention_blocked, schedule_rowwise, schedule_attention, schedule_reduce,
                 schedule_transform]
    for choice in ([rule] if rule else []) + fallbacks:
        s = choice(outputs, target)
        if s is not None:
            return s
    return schedule_generic(outputs, target)

"""Default x86 schedule of an nn.attention group: the reduction schedule, except that the softmax
probabilities are computed once into a buffer. Inlined, exp(logit - max) / sum would be recomputed
for every element of the head dimension inside probs @ V (dv times the exps of the softmax).
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.target import Target
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import Tensor
from kiln.topi.knobs import knob
from kiln.topi.schedule_anchor import (
    block,
    data_size,
    inline_injective,
    is_pad,
    is_reduction,
    materialize,
    parallel_outer,
)
from kiln.topi.schedule_generic import loop_nest
from kiln.topi.schedule_reduce import reduce_nest

MATERIALIZED = ("attn_probs",)  # injective stages of the attention compute worth one buffer each
SCORES = "attn_raw"  # Q K^T: reduces over the head dim, which is contiguous in Q and K alike
SCORE_RUN = 16  # keys per vector of scores


def scores_nest(st: Stage) -> None:
    """Q K^T with the head dim outside a vectorized run of keys (K read with a stride: a gather),
    rather than innermost, where a float sum is one sequential dependence chain per score."""
    *rows, j = st.op.axis
    jo, ji = st.split(j, block(j.dom.extent, knob("attention.score_run", (8, 16, 32, 64), SCORE_RUN)))
    st.reorder(*rows, jo, *st.op.reduce_axis, ji)
    parallel_outer(st, [*rows, jo], data_size(st, reduce_too=True))
    st.vectorize(ji)


def _keep(st: Stage) -> bool:
    return is_pad(st) or st.op.name in MATERIALIZED


def schedule_attention(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    s = create_schedule(outputs)
    if not any(st.op.name in MATERIALIZED for st in s.stages):
        return None
    for st in inline_injective(s, outputs, keep=_keep):
        if st.op.name == SCORES and is_reduction(st):
            scores_nest(st)
        elif is_reduction(st):
            reduce_nest(s, st, target)
        elif _keep(st):
            materialize(st, target)
        else:
            loop_nest(st, target)
    return s

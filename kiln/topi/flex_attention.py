"""FlexAttention without modifiers (kiln/op/attention.py) is nn.attention with no mask, cap or cache: scores
scaled by sqrt(scale) on both sides in the wide dtype, a softmax in the softmax dtype, then probs @ V. So
its compute is nn.attention's (and gets the attention schedules). Modifier functions (score_mod,
prob_mod) are graphs of their own and have no compute; neither has a float16/bfloat16 softmax.
"""

from __future__ import annotations

from kiln.ir.types import TensorType, TupleType
from kiln.op.attention import AttentionAttrs, flex_softmax_dtype
from kiln.topi.registry import ComputeError, compute_call, register_compute, tensor_type

NAME = "nn.flex_attention"


@register_compute(NAME)
def _flex_attention(attrs, inputs, out_type, consts):
    score_mod, prob_mod, q, k, v = inputs[:5]
    if score_mod is not None or prob_mod is not None:
        raise ComputeError(f"{NAME}: score_mod/prob_mod functions have no compute")
    y = tensor_type(out_type)
    if q.ndim != 4:
        raise ComputeError(f"{NAME}: Q of rank {q.ndim} has no compute")
    sm = flex_softmax_dtype(attrs, q.dtype)
    as_attention = AttentionAttrs(scale=attrs.scale, softmax_precision=sm)
    types = TupleType((y, TensorType(None, k.dtype), TensorType(None, v.dtype), TensorType(None, q.dtype)))
    return compute_call("nn.attention", as_attention, [q, k, v], types, [None] * 7)[0]

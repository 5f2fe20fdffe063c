"""The compute of nn.linear_attention (kiln/op/rnn.py): one ExternOp on the runtime library's
kiln_linear_attention (kiln/codegen/runtime_lib/linear_attention.c).

The state update is a recurrence over time whose delta rules read the previous state (u = beta (v -
S^T k)), so it is no loop nest; te would need the whole (T, d_k, d_v) state history to express it. The
C function runs the time loop per (batch, kv head) and keeps one state. te around it converts inputs
to float32 (the reference's state math) and the outputs back to their dtypes; an omitted past_state
is zeros. The te evaluator runs the operator's numpy reference in the function's place.
"""

from __future__ import annotations

import struct

import numpy as np

from kiln import te, tir
from kiln.op.rnn import UPDATE_RULES, LinearAttentionAttrs, linear_attention_ref
from kiln.te.eval import EXTERN_FUNCS
from kiln.te.tensor import ExternOp
from kiln.topi.registry import ComputeError, register_compute, tensor_type

FUNC = "kiln_linear_attention"
ACC = "float32"


def _f32(x: te.Tensor, name: str) -> te.Tensor:
    return x if x.dtype == ACC else te.compute(x.shape, lambda *i: tir.cast(ACC, x(*i)), name=name)


def _absent() -> te.Tensor:
    """An empty stand-in for an omitted decay or beta (the function reads a flag instead)."""
    return te.compute((0,), lambda i: tir.const(0.0, ACC), name="absent")


def _scale_bits(scale: float) -> int:
    return struct.unpack("<q", struct.pack("<d", scale))[0]


@register_compute("nn.linear_attention")
def _linear_attention(attrs, inputs, out_type, consts):
    q, k, v, past, decay, beta = inputs
    hq, hkv = attrs.q_num_heads, attrs.kv_num_heads
    if not all(isinstance(d, tir.IntImm) for d in (q.shape[2], v.shape[2])):
        raise ComputeError("nn.linear_attention: the packed head sizes (last dims of query and value) must be static")
    dk, dv = q.shape[2].value // hq, v.shape[2].value // hkv
    batch, steps = q.shape[0], q.shape[1]
    state_shape = (batch, tir.IntImm(hkv), tir.IntImm(dk), tir.IntImm(dv))
    init = _f32(past, "la_past") if past is not None else \
        te.compute(state_shape, lambda *i: tir.const(0.0, ACC), name="la_zero_state")
    scale = attrs.scale if attrs.scale else 1 / float(np.sqrt(dk))
    ins = (_f32(q, "la_q"), _f32(k, "la_k"), _f32(v, "la_v"), init,
           _f32(decay, "la_decay") if decay is not None else _absent(),
           _f32(beta, "la_beta") if beta is not None else _absent())
    scalars = (hq, hkv, int(decay is not None), int(beta is not None), _scale_bits(scale))
    op = ExternOp("linear_attention", ins, ((batch, steps, tir.IntImm(hq * dv)), state_shape), (ACC, ACC), FUNC,
                  tuple(tir.const(s) for s in scalars))
    outs = []
    for n, t in enumerate((op.output(0), op.output(1))):
        want = tensor_type(out_type, n).dtype
        outs.append(t if want == ACC else te.compute(t.shape, lambda *i, t=t, w=want: tir.cast(w, t(*i)),
                                                     name=f"la_out{n}"))
    return tuple(outs)


def _reference(ins: list[np.ndarray], scalars: list) -> tuple[np.ndarray, ...]:
    """FUNC's numpy version: the operator's reference on the float32 inputs."""
    hq, hkv, has_decay, has_beta, bits = (int(s) for s in scalars)
    rule = next(r for r, uses in UPDATE_RULES.items() if uses == (bool(has_decay), bool(has_beta)))
    scale = struct.unpack("<d", struct.pack("<q", bits))[0]
    attrs = LinearAttentionAttrs(kv_num_heads=hkv, q_num_heads=hq, scale=scale, update_rule=rule)
    q, k, v, past, decay, beta = ins
    return linear_attention_ref(attrs, q, k, v, past, decay if has_decay else None, beta if has_beta else None)


EXTERN_FUNCS[FUNC] = _reference

"""The te compute of nn.causal_conv_with_state (kiln/op/rnn.py): a depthwise causal conv1d that
continues from a carried state, as used by state-space / linear-attention blocks.

The input is seen padded on the left by past_state (the previous call's last k-1 inputs, zeros when
omitted); each output is a k-tap window of that padded sequence in float32, plus bias, with an
optional SiLU. present_state is the padded sequence's last k-1 entries, so the state length comes
from the weight's shape even where the type relation leaves it unknown.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.tir.expr import PrimExpr
from kiln.topi.registry import register_compute

ACC = "float32"  # the reference computes windows, bias and SiLU in float32


def _minus_one(k: PrimExpr) -> PrimExpr:
    return tir.IntImm(k.value - 1) if isinstance(k, tir.IntImm) else k - 1


@register_compute("nn.causal_conv_with_state")
def _causal_conv_with_state(attrs, inputs, out_type, consts):
    x, w, bias, past = inputs
    batch, channels, length = x.shape
    taps = w.shape[2]
    lead = _minus_one(taps)  # how many state entries precede x[..., 0]

    def padded(b: PrimExpr, c: PrimExpr, p: PrimExpr) -> PrimExpr:
        """Entry p of concat(past_state, x) along time, in x's dtype."""
        head = past(b, c, p) if past is not None else tir.const(0, x.dtype)
        return tir.select(p < lead, head, x(b, c, p - lead))

    def conv(b, c, t):
        k = te.reduce_axis(taps, "k")
        return te.sum(tir.cast(ACC, padded(b, c, t + k.var)) * tir.cast(ACC, w(c, 0, k.var)), k)

    acc = te.compute((batch, channels, length), conv, name="causal_conv")

    def finish(b, c, t):
        y = acc(b, c, t)
        if bias is not None:
            y = y + tir.cast(ACC, bias(c))
        if attrs.activation != "none":  # silu and its alias swish
            y = y / (tir.const(1.0, ACC) + te.exp(-y))
        return tir.cast(x.dtype, y)

    out = te.compute((batch, channels, length), finish, name="causal_conv_out")
    state = te.compute((batch, channels, lead), lambda b, c, s: padded(b, c, length + s), name="present_state")
    return out, state

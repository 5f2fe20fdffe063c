"""A 1-D convolution as a 2-D one over a height of 1, so alter-op-layout gives it the blocked conv
kernel (register tiles over output columns and channel blocks) instead of the generic conv schedule.

    conv1d(x[N, C, L], w[M, C/g, K]) = squeeze(conv2d(unsqueeze(x, 2), unsqueeze(w, 2)), 2)

with the kernel, strides, dilations and pads given a leading unit axis. The unsqueeze of a constant
weight folds; the ones around the data are reshapes between the blocked regions. A unary elementwise
op on the result (an activation) moves before the squeeze, so that it stays in the conv's blocked
region and fuses into the kernel's store; so do slices of it and elementwise ops of two such results
(WaveNet's gate tanh(a) * sigmoid(b) over a conv's halves).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, Function, is_absent
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import rewrite
from kiln.op.registry import OpDef, Pattern, get_op
from kiln.transform.infra import PassContext, function_pass


def as_conv2d(call: Call) -> Expr | None:
    x, w = call.args[0], call.args[1]
    xt, a = x.type, call.attrs
    if not (isinstance(xt, TensorType) and xt.shape is not None and len(xt.shape) == 3 and isinstance(w, Constant)):
        return None
    if w.data.ndim != 3 or a.auto_pad not in ("NOTSET", "VALID"):
        return None
    pads = a.pads if a.pads is not None else (0, 0)
    attrs = replace(a, kernel_shape=(1, w.data.shape[2]), pads=(0, pads[0], 0, pads[1]),
                    strides=(1, *(a.strides or (1,))), dilations=(1, *(a.dilations or (1,))))
    axis = Constant(np.array([2], np.int64))
    bias = [call.args[2]] if len(call.args) > 2 and not is_absent(call.args[2]) else []
    y = get_op("nn.conv")(_unsqueezed(x, axis), Constant(np.ascontiguousarray(w.data[:, :, None])),
                          *bias, attrs=attrs)
    return get_op("tensor.squeeze")(y, axis)


def _below_squeeze(call: Call, squeezed: set[int]) -> Expr | None:
    """`call` on squeezed conv results, moved above the squeeze (which then follows it), or None: a unary
    elementwise op, an elementwise op of two squeezed values (a gate: tanh(a) * sigmoid(b)), or a slice
    with constant bounds (the gate's halves of one conv)."""
    op, args = call.op, call.args
    if op.pattern in (Pattern.ELEMWISE, Pattern.BROADCAST) and args and all(id(a) in squeezed for a in args):
        if len({a.args[0].type for a in args}) != 1:  # type: ignore[union-attr]
            return None
        sq = args[0]
        return Call(sq.op, (Call(op, tuple(a.args[0] for a in args), call.attrs, call.name), *sq.args[1:]), sq.attrs)
    if op.name == "tensor.slice" and id(args[0]) in squeezed and all(isinstance(a, Constant) for a in args[1:]):
        sq = args[0]
        n = args[1].data.size
        axes = args[3].data.reshape(-1) if len(args) > 3 else np.arange(n)
        axes4 = np.array([a % 3 + (a % 3 >= 2) for a in axes.tolist()], np.int64)  # the squeezed axis is 2
        sliced = Call(op, (sq.args[0], args[1], args[2], Constant(axes4), *args[4:]), call.attrs, call.name)
        return Call(sq.op, (sliced, *sq.args[1:]), sq.attrs)
    return None


def _unsqueezed(x: Expr, axis: Constant) -> Expr:
    """x with a unit axis 2: the 4-D value itself when x squeezed it away (one 1-D conv feeding the
    next), so that the two stay in one blocked region."""
    if isinstance(x, Call) and isinstance(x.op, OpDef) and x.op.name == "tensor.squeeze" and len(x.args) == 2 \
            and isinstance(x.args[1], Constant) and x.args[1].data.reshape(-1).tolist() == [2]:
        return x.args[0]
    return get_op("tensor.unsqueeze")(x, axis)


@function_pass("conv1d-as-conv2d", opt_level=2)
def conv1d_as_conv2d(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """nn.conv on [N, C, L] with a constant weight -> the same conv over [N, C, 1, L]."""

    def post(old: Expr, new: Expr) -> Expr:
        if isinstance(new, Call) and isinstance(new.op, OpDef) and new.op.name == "nn.conv":
            out = as_conv2d(new)
            if out is not None and out.type == new.type:
                squeezed.add(id(out))
                return out
        if isinstance(new, Call) and isinstance(new.op, OpDef):
            out = _below_squeeze(new, squeezed)
            if out is not None and out.type == new.type:
                squeezed.add(id(out))
                return out
        return new

    squeezed: set[int] = set()  # the squeezes this pass made, and those moved below an activation

    return rewrite(fn, post)

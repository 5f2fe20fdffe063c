"""A 1-D convolution as a 2-D one over a height of 1, so alter-op-layout gives it the blocked conv
kernel (register tiles over output columns and channel blocks) instead of the generic conv schedule.

    conv1d(x[N, C, L], w[M, C/g, K]) = squeeze(conv2d(unsqueeze(x, 2), unsqueeze(w, 2)), 2)

with the kernel, strides, dilations and pads given a leading unit axis. The unsqueeze of a constant
weight folds; the ones around the data are reshapes between the blocked regions. A unary elementwise
op on the result (an activation) moves before the squeeze, so that it stays in the conv's blocked
region and fuses into the kernel's store.
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
    y = get_op("nn.conv")(get_op("tensor.unsqueeze")(x, axis), Constant(np.ascontiguousarray(w.data[:, :, None])),
                          *bias, attrs=attrs)
    return get_op("tensor.squeeze")(y, axis)


@function_pass("conv1d-as-conv2d", opt_level=2)
def conv1d_as_conv2d(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """nn.conv on [N, C, L] with a constant weight -> the same conv over [N, C, 1, L]."""

    def post(old: Expr, new: Expr) -> Expr:
        if isinstance(new, Call) and isinstance(new.op, OpDef) and new.op.name == "nn.conv":
            out = as_conv2d(new)
            if out is not None and out.type == new.type:
                squeezed.add(id(out))
                return out
        if isinstance(new, Call) and isinstance(new.op, OpDef) and new.op.pattern == Pattern.ELEMWISE \
                and len(new.args) == 1 and id(new.args[0]) in squeezed:
            sq = new.args[0]
            out = Call(sq.op, (Call(new.op, (sq.args[0],), new.attrs, new.name), *sq.args[1:]), sq.attrs)
            if out.type == new.type:
                squeezed.add(id(out))
                return out
        return new

    squeezed: set[int] = set()  # the squeezes this pass made, and those moved below an activation

    return rewrite(fn, post)

"""ConvTranspose as an ordinary convolution: the fast conv kernels then serve it too.

A transposed conv with stride s writes input pixel i to outputs i*s + k - pad. Output o receives only
the taps k = (o + pad) mod s, (o + pad) mod s + s, ...: each of the s*s output phases (o mod s in each
dim) is an ordinary correlation of the input with a flipped sub-kernel. So

    conv_transpose(x, w) = slice(depth_to_space(conv(x, W', pads = T - 1), s))

where W' stacks the s*s phase sub-kernels as output channels (DCR order), the kernel is zero-padded
to T*s taps, and the slice crops the ONNX pads. No tap is multiplied by an inserted zero, unlike
convolving a zero-upsampled input; the direct compute (kiln/topi/nn.py) loops over every tap and
tests divisibility per output element, at under 1 GFLOP/s.

Applies to 2-D, group 1, dilation 1, equal strides, a constant weight, float dtypes, and output
windows inside the transposed conv's support (output_padding beyond it stays with the direct compute).
"""

from __future__ import annotations

import numpy as np

from kiln.ir import dtype as dt
from kiln.ir.expr import Call, Constant, Expr, Function
from kiln.ir.module import IRModule
from kiln.ir.sizes import fits
from kiln.ir.types import TensorType
from kiln.ir.visitor import rewrite
from kiln.op.nn import ConvAttrs, Window, convt_axis
from kiln.op.registry import OpDef, get_op
from kiln.transform.infra import PassContext, function_pass


def phase_weight(w: np.ndarray, s: int) -> tuple[np.ndarray, int]:
    """(W' [s*s*M, C, T, T], T) for a ConvTranspose weight w [C, M, K, K'] of stride s: phase (ry, rx)
    output channel m convolves with w[c, m, ry + (T-1-jy)*s, rx + (T-1-jx)*s] (zero past K)."""
    c, m, kh, kw = w.shape
    t = phase_taps(w, s)
    padded = np.zeros((c, m, t * s, t * s), w.dtype)
    padded[:, :, :kh, :kw] = w
    taps = padded.reshape(c, m, t, s, t, s)[:, :, ::-1, :, ::-1, :]  # [c, m, T-1-jy, ry, T-1-jx, rx]
    return np.ascontiguousarray(taps.transpose(3, 5, 1, 0, 2, 4).reshape(s * s * m, c, t, t)), t


def phase_taps(w: np.ndarray, s: int) -> int:
    """T: taps per phase of a ConvTranspose weight [C, M, K, K'] of stride s."""
    return max(-(-w.shape[2] // s), -(-w.shape[3] // s))


def as_conv(call: Call) -> Expr | None:
    x, w = call.args[0], call.args[1]
    b = call.args[2] if len(call.args) > 2 else None
    a = call.attrs
    xt, yt = x.type, call.type
    if not (isinstance(w, Constant) and isinstance(xt, TensorType) and isinstance(yt, TensorType)):
        return None
    if xt.dtype not in dt.FLOATS or xt.shape is None or len(xt.shape) != 4 or yt.shape is None or a.group != 1:
        return None
    if not all(isinstance(d, int) for d in (*xt.shape[2:], *yt.shape[2:])) or w.data.ndim != 4:
        return None
    if b is not None and not isinstance(b, Constant):
        return None
    win = Window.of(a, w.data.shape[2:])
    s = win.strides[0]
    if any(d != 1 for d in win.dilations) or win.strides[1] != s:
        return None
    t = phase_taps(w.data, s)
    if not fits((*w.data.shape[:2], t * s, t * s), w.data.dtype):  # a stride far past the kernel: left as it is
        return None
    wp, t = phase_weight(w.data, s)
    begins = []
    for i, n in enumerate(xt.shape[2:]):
        out, begin = convt_axis(a, win, i, n)
        if begin is None or begin < 0 or begin + out > (n + t - 1) * s:
            return None
        begins.append(begin)
    bias = [Constant(np.tile(b.data, s * s))] if b is not None else []
    y = get_op("nn.conv")(x, Constant(wp), *bias, attrs=ConvAttrs(kernel_shape=(t, t), pads=(t - 1,) * 4))
    if s > 1:
        y = get_op("tensor.depth_to_space")(y, blocksize=s, mode="DCR")
    ends = [bg + o for bg, o in zip(begins, yt.shape[2:])]
    if begins == [0, 0] and all(e == (n + t - 1) * s for e, n in zip(ends, xt.shape[2:])):
        return y
    return get_op("tensor.slice")(y, Constant(np.array(begins, np.int64)), Constant(np.array(ends, np.int64)),
                                  Constant(np.array([2, 3], np.int64)))


@function_pass("conv-transpose-to-conv", opt_level=2)
def conv_transpose_to_conv(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """nn.conv_transpose (2-D, group 1, constant weight) -> conv, depth_to_space and a crop."""

    def post(old: Expr, new: Expr) -> Expr:
        if isinstance(new, Call) and isinstance(new.op, OpDef) and new.op.name == "nn.conv_transpose":
            out = as_conv(new)
            if out is not None and out.type == new.type:
                return out
        return new

    return rewrite(fn, post)

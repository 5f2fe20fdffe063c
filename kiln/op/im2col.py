"""quant.im2col: the windows of a 2-D convolution as the rows of a matrix, so the int8 convolution is
one integer GEMM (kiln/transform/int8_ops.py): x[N, H, W, C] (NHWC) -> cols[N, Ho, Wo, kh * kw * C],
element ((i * kw + j) * C + c) of row (n, ho, wo) being x[n, ho * sh + i * dh - top, wo * sw + j * dw - left, c],
or `pad_value` (the activation's zero point: a quantized 0) outside x. Channels are innermost on both
sides, so each tap copies C contiguous bytes; and a convolution reading another's qgemm output (NHWC,
transposed to NCHW) reads it in place once simplify-expr cancels the two transposes.

Opaque to fusion: each element of x lands in up to kh * kw rows, so a producer fused in (the float
input's QuantizeLinear, a transpose) would be recomputed that many times; x is materialized once instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import TensorType
from kiln.op.registry import OPAQUE, define_op
from kiln.op.typerel import tensor

NAME = "quant.im2col"


@dataclass(frozen=True)
class Im2ColAttrs:
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    dilations: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right


def out_size(attrs: Im2ColAttrs, h: int, w: int) -> tuple[int, int]:
    (kh, kw), (sh, sw), (dh, dw), (t, left, b, r) = attrs.kernel, attrs.strides, attrs.dilations, attrs.pads
    return (h + t + b - dh * (kh - 1) - 1) // sh + 1, (w + left + r - dw * (kw - 1) - 1) // sw + 1


def _ref(attrs: Im2ColAttrs, x, pad_value):
    (kh, kw), (sh, sw), (dh, dw), (t, left, b, r) = attrs.kernel, attrs.strides, attrs.dilations, attrs.pads
    n, h, w, c = x.shape
    ho, wo = out_size(attrs, h, w)
    xp = np.pad(x, [(0, 0), (t, b), (left, r), (0, 0)], constant_values=np.asarray(pad_value).reshape(())[()])
    taps = [xp[:, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw, :]
            for i in range(kh) for j in range(kw)]
    return np.ascontiguousarray(np.stack(taps, 3).reshape(n, ho, wo, kh * kw * c))


def _rel(attrs: Im2ColAttrs, types, values) -> TensorType:
    x = tensor(types[0], "x")
    if x.shape is None or len(x.shape) != 4 or not all(isinstance(d, int) for d in x.shape):
        raise TypeInferenceError(f"{NAME}: x {x} must be a static [N, H, W, C] tensor")
    n, h, w, c = x.shape
    ho, wo = out_size(attrs, h, w)
    if ho < 1 or wo < 1:
        raise TypeInferenceError(f"{NAME}: a {attrs.kernel} window does not fit x {x} with pads {attrs.pads}")
    return TensorType((n, ho, wo, attrs.kernel[0] * attrs.kernel[1] * c), x.dtype)


im2col = define_op(NAME, pattern=OPAQUE, attrs=Im2ColAttrs, inputs=2, infer=_rel, ref=_ref,
                   doc="the windows of a 2-D convolution over NHWC x as matrix rows (taps then channels)")

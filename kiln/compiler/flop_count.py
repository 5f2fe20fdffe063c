"""FLOPs of one run of a model, for benchmarks' GFLOP/s."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.ir.expr import Expr
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType


def flop_count(mod: IRModule) -> int:
    """FLOPs of one run counted from conv, transposed conv, matmul, gemm and the LSTM / GRU cells, also in
    their blocked and packed forms (2 per multiply-add); needs static shapes."""
    return sum(function_flops(fn) for fn in mod.functions.values())


def function_flops(fn: Expr) -> int:
    """`flop_count` of one function (a model's main, or one fused group)."""
    from kiln.ir.visitor import post_order

    return sum(call_flops(e) for e in post_order(fn))


def call_flops(e: Expr) -> int:
    """FLOPs of one call alone (its arguments not counted); 0 for anything that is not a counted operator."""
    from kiln.ir.expr import Call, Op

    if not (isinstance(e, Call) and isinstance(e.op, Op)) or e.op.name not in _MACS:
        return 0
    shapes = [a.type.shape if isinstance(a.type, TensorType) else None for a in e.args[:2]]
    out = e.type.shape if isinstance(e.type, TensorType) else ()  # a recurrent op's outputs are a tuple
    if None in shapes or not all(isinstance(d, int) for s in (*shapes, out) for d in s):
        return 0
    return 2 * _MACS[e.op.name](e, *shapes, out)


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _recurrent(gates: int) -> Callable[..., int]:
    """Multiply-adds of an LSTM (4 gates) or GRU (3): every step, every direction, x and h through
    W [directions, gates * H, I] and R [directions, gates * H, H]; X is [seq, batch, I] in either layout."""
    return lambda e, x, w, out: x[0] * x[1] * w[0] * w[1] * (w[2] + w[1] // gates)


_MACS: dict[str, Callable[..., int]] = {  # multiply-adds of one call, from its first two inputs and its output
    "nn.conv": lambda e, x, w, out: _size(out) * _size(w[1:]),
    "nn.conv_transpose": lambda e, x, w, out: _size(x) * _size(w[1:]),  # each input element meets its kernel
    "linalg.mat_mul": lambda e, a, b, out: _size(out) * a[-1],
    "linalg.gemm": lambda e, a, b, out: _size(out) * (a[0] if e.attrs.transA else a[1]),
    "nn.lstm": _recurrent(4),
    "nn.gru": _recurrent(3),
    # the optimized graph's forms: a blocked conv's W is [O/o, I/i, KH, KW, i, o], a packed dense's A is [..., K]
    "nn.conv2d_nchwc": lambda e, x, w, out: _size(out) * _size(w) // (w[0] * w[-1]),
    "linalg.dense_packed": lambda e, a, w, out: _size(out) * a[-1],
    "quant.qgemm": lambda e, a, w, out: _size(out) * a[-1],  # integer multiply-adds: the GOP/s of the int8 kernels
}

"""FLOPs of one run of a model, for benchmarks' GFLOP/s."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.ir.expr import Expr
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType


def flop_count(mod: IRModule) -> int:
    """FLOPs of one run counted from conv, matmul and gemm, also in their blocked and packed forms (2 per
    multiply-add); needs static shapes."""
    return sum(function_flops(fn) for fn in mod.functions.values())


def function_flops(fn: Expr) -> int:
    """`flop_count` of one function (a model's main, or one fused group)."""
    from kiln.ir.expr import Call, Op
    from kiln.ir.visitor import post_order

    total = 0
    for e in post_order(fn):
        if not (isinstance(e, Call) and isinstance(e.op, Op)) or e.op.name not in _MACS:
            continue
        shapes = [a.type.shape if isinstance(a.type, TensorType) else None for a in e.args[:2]]
        out = e.type.shape if isinstance(e.type, TensorType) else None
        if out is None or None in shapes or not all(isinstance(d, int) for s in (*shapes, out) for d in s):
            continue
        total += 2 * int(np.prod(out, dtype=np.int64)) * _MACS[e.op.name](e, *shapes)
    return total


_MACS: dict[str, Callable[..., int]] = {  # multiply-adds per output element
    "nn.conv": lambda e, x, w: int(np.prod(w[1:], dtype=np.int64)),
    "linalg.mat_mul": lambda e, a, b: a[-1],
    "linalg.gemm": lambda e, a, b: a[0] if e.attrs.transA else a[1],
    # the optimized graph's forms: a blocked conv's W is [O/o, I/i, KH, KW, i, o], a packed dense's A is [..., K]
    "nn.conv2d_nchwc": lambda e, x, w: int(np.prod(w, dtype=np.int64)) // (w[0] * w[-1]),
    "linalg.dense_packed": lambda e, a, w: a[-1],
    "quant.qgemm": lambda e, a, w: a[-1],  # integer multiply-adds: the GOP/s of the int8 kernels
}

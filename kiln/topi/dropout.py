"""Training-mode dropout (kiln/op/nn.py) through the runtime library's kiln_dropout, which draws the very
numbers of the reference (numpy's RandomState(seed)), so compiled and reference masks are identical.

Without a seed the reference draws from a fresh, unseeded generator; nothing can match it, so that case
runs on the host. nn.dropout's compute (kiln/topi/elemwise.py) hands training mode here.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.topi.extern import extern
from kiln.topi.registry import ComputeError

DTYPES = ("float16", "bfloat16", "float32", "float64")


def training_dropout(attrs, inputs, out_type) -> tuple[te.Tensor, ...]:
    x, ratio, training = inputs[:3]
    if attrs.seed is None:
        raise ComputeError("nn.dropout in training mode without a seed draws unseeded numbers (no compute)")
    if not 0 <= attrs.seed < 2 ** 32:
        raise ComputeError(f"nn.dropout: seed {attrs.seed} is outside numpy's [0, 2**32) (no compute)")
    if x.dtype not in DTYPES or (ratio is not None and ratio.dtype not in DTYPES):
        raise ComputeError(f"nn.dropout in training mode has no compute for {x.dtype}")
    if ratio is None:  # the default ratio 0.5
        ratio = te.compute((), lambda: tir.const(0.5, "float32"), name="dropout_ratio")
    return extern("dropout", "kiln_dropout", [x, ratio, training], out_type, 2, (int(attrs.seed),))

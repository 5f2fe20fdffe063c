"""The te compute of linalg.dense_packed: A[..., m, k] times a weight packed in column panels
W[n / nr, k, nr] (kiln/transform/pack_dense.py). The accumulator stage records nr as its "panel"
attribute, so the dense schedule tiles the columns by whole panels and reads each one contiguously.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ComputeError
from kiln.topi.elemwise import wide_dtype
from kiln.topi.registry import out_dims, register_compute


@register_compute("linalg.dense_packed")
def _dense_packed(attrs, inputs, out_type, consts):
    a, w = inputs[0], inputs[1]
    nr = w.shape[2]
    if not isinstance(nr, tir.IntImm):
        raise ComputeError(f"linalg.dense_packed: the panel width {nr} must be a constant")
    shape = out_dims(out_type, inputs)
    acc = wide_dtype(a.dtype)
    k = te.reduce_axis(a.shape[-1], "k")

    def f(*i):
        *rows, n = i
        va, vw = a(*rows, k.var), w(n // nr.value, k.var, n % nr.value)
        return te.sum(tir.cast(acc, va) * tir.cast(acc, vw), k)

    y = te.compute(shape, f, name="dense_acc", attrs={"panel": nr.value})
    return te.compute(shape, lambda *i: tir.cast(a.dtype, y(*i)), name="dense")

"""The compute of tensor.compress (kiln/op/selection.py), which keeps a data-dependent number of slices:
the kept positions come from the runtime library's non-zero kernel, whose count is the output's
extent; the gather reads them.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.types import ANY, TensorType
from kiln.topi.extern import extern
from kiln.topi.injective import reshape_to
from kiln.topi.registry import ComputeError, register_compute


@register_compute("tensor.compress")
def _compress(attrs, inputs, out_type, consts):
    x, cond = inputs
    name = "tensor.compress"
    if cond.ndim != 1:
        raise ComputeError(f"{name}: condition must be 1-D, got rank {cond.ndim}")
    if attrs.axis is None:
        n = x.shape[0] if x.ndim else tir.const(1)
        for d in x.shape[1:]:
            n = n * d
        x, axis = reshape_to(x, (n,), "compress_flat"), 0
    else:
        axis = attrs.axis % x.ndim
    nz_type = TensorType((1, ANY), "int64")
    (nz,) = extern("compress_positions", "kiln_non_zero", [cond], nz_type, 1,
                   known={0: (tir.const(1), tir.Var("kept"))})
    size, length = x.shape[axis], cond.shape[0]
    if isinstance(size, tir.IntImm) and isinstance(length, tir.IntImm) and length.value > size.value:
        raise ComputeError(f"{name}: condition has {length.value} entries for an axis of {size.value}")
    last = size - 1

    def f(*i):
        src = tir.min_(nz(tir.const(0), i[axis]), last)  # NOTE: a condition longer than the axis reads in bounds
        return x(*(src if a == axis else v for a, v in enumerate(i)))

    shape = tuple(nz.shape[1] if a == axis else d for a, d in enumerate(x.shape))
    return te.compute(shape, f, name="compress")


# ---------------------------------------------------------------------------------------------

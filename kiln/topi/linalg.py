"""Matrix products: mat_mul (numpy.matmul: 1-D operands, broadcast batch dims) and gemm; det.

16-bit floats accumulate in float32; integers in their own dtype (wrapping), as the references.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.topi.elemwise import wide_dtype
from kiln.topi.extern import extern
from kiln.topi.registry import is_one, out_dims, register_compute


@register_compute("linalg.mat_mul")
def _mat_mul(attrs, inputs, out_type, consts):
    a, b = inputs[0], inputs[1]
    shape = out_dims(out_type, inputs)
    acc = wide_dtype(a.dtype)
    k = te.reduce_axis(a.shape[-1], "k")
    nb = len(shape) - (a.ndim > 1) - (b.ndim > 1)  # batch dims of the output

    def operand(x, batch, row):
        """x's index: its batch dims (broadcast, right-aligned) then its matrix index."""
        xb = x.ndim - 2 if x.ndim > 1 else 0
        lead = [tir.const(0) if is_one(x.shape[d]) else batch[nb - xb + d] for d in range(xb)]
        return lead + row

    def f(*i):
        batch = i[:nb]
        m = [i[nb]] if a.ndim > 1 else []
        n = [i[-1]] if b.ndim > 1 else []
        va = a(*operand(a, batch, m + [k.var]))
        vb = b(*operand(b, batch, [k.var] + n))
        return te.sum(tir.cast(acc, va) * tir.cast(acc, vb), k)

    y = te.compute(shape, f, name="matmul_acc")
    return te.compute(shape, lambda *i: tir.cast(a.dtype, y(*i)), name="matmul")


@register_compute("linalg.gemm")
def _gemm(attrs, inputs, out_type, consts):
    a, b, c = inputs[:3]
    shape = out_dims(out_type, inputs)
    acc = wide_dtype(a.dtype)
    kdim = a.shape[0] if attrs.transA else a.shape[1]
    k = te.reduce_axis(kdim, "k")

    def f(m, n):
        va = a(k.var, m) if attrs.transA else a(m, k.var)
        vb = b(n, k.var) if attrs.transB else b(k.var, n)
        return te.sum(tir.cast(acc, va) * tir.cast(acc, vb), k)

    y = te.compute(shape, f, name="gemm_acc")

    def out(m, n):
        v = y(m, n)
        if attrs.alpha != 1.0:
            v = v * tir.const(attrs.alpha, acc)
        if c is not None:
            off = 2 - c.ndim
            cv = tir.cast(acc, c(*(tir.const(0) if is_one(d) else (m, n)[off + j] for j, d in enumerate(c.shape))))
            v = v + (cv * tir.const(attrs.beta, acc) if attrs.beta != 1.0 else cv)
        return tir.cast(a.dtype, v)

    return te.compute(shape, out, name="gemm")


@register_compute("linalg.det")
def _det(attrs, inputs, out_type, consts):
    """LU with partial pivoting is sequential and data-dependent: the runtime library's kiln_det."""
    x = inputs[0]
    return extern("det", "kiln_det", [x], out_type, 1)

"""Einsum as one te reduction: output labels (and broadcast '...' dims) are the compute's axes,
labels in no output are reduce axes, a label repeated within a term reads a diagonal. Narrow
floats accumulate in float32, as the reference (which widens them) does.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.op.linalg import split_equation
from kiln.tir import PrimExpr
from kiln.topi.elemwise import wide_dtype
from kiln.topi.registry import ComputeError, is_one, register_compute


def _ellipsis_dims(terms: list[str], xs: list[te.Tensor]) -> list[tuple[PrimExpr, ...]]:
    """The dims each operand's '...' stands for (empty when it has none)."""
    out = []
    for term, x in zip(terms, xs):
        pre, ell, post = term.partition("...")
        out.append(tuple(x.shape[len(pre):x.ndim - len(post)]) if ell else ())
    return out


def _broadcast(ells: list[tuple[PrimExpr, ...]]) -> list[PrimExpr]:
    """numpy broadcasting of the ellipsis shapes (right-aligned; a unit dim yields)."""
    n = max((len(e) for e in ells), default=0)
    out: list[PrimExpr] = [tir.const(1)] * n
    for e in ells:
        for k, d in enumerate(e):
            if is_one(out[n - len(e) + k]):
                out[n - len(e) + k] = d
    return out


@register_compute("linalg.einsum")
def _einsum(attrs, inputs, out_type, consts):
    xs = [x for x in inputs if x is not None]
    terms, out = split_equation(attrs.equation)
    if len(terms) != len(xs):
        raise ComputeError(f"linalg.einsum: {len(terms)} terms for {len(xs)} inputs")
    dims: dict[str, PrimExpr] = {}
    for term, x in zip(terms, xs):
        pre, _, post = term.partition("...")
        for ch, d in zip(pre + post, x.shape[:len(pre)] + x.shape[x.ndim - len(post):]):
            if ch not in dims or is_one(dims[ch]):
                dims[ch] = d
    ells = _ellipsis_dims(terms, xs)
    batch = _broadcast(ells)
    opre, oell, opost = out.partition("...")
    keep_batch = bool(oell)
    summed = sorted(set("".join(terms).replace("...", "")) - set(opre + opost))
    shape = [dims[c] for c in opre] + (batch if keep_batch else []) + [dims[c] for c in opost]
    acc = wide_dtype(xs[0].dtype)

    def f(*i):
        red = [te.reduce_axis(dims[c], f"r_{c}") for c in summed]
        red_batch = [] if keep_batch else [te.reduce_axis(d, f"r_ell{k}") for k, d in enumerate(batch)]
        env = dict(zip(opre, i[:len(opre)]))
        env.update(zip(opost, i[len(i) - len(opost):]))
        env.update({c: r.var for c, r in zip(summed, red)})
        bvars = list(i[len(opre):len(opre) + len(batch)]) if keep_batch else [r.var for r in red_batch]
        value: PrimExpr | None = None
        for term, x, e in zip(terms, xs, ells):
            pre, _, post = term.partition("...")
            eidx = [tir.const(0) if is_one(d) else bvars[len(batch) - len(e) + k] for k, d in enumerate(e)]
            v = tir.cast(acc, x(*([env[c] for c in pre] + eidx + [env[c] for c in post])))
            value = v if value is None else value * v
        axes = red + red_batch
        return te.sum(value, axes) if axes else value

    y = te.compute(shape, f, name="einsum_acc")
    return te.compute(y.shape, lambda *i: tir.cast(xs[0].dtype, y(*i)), name="einsum")

"""Classification losses: negative log-likelihood and softmax cross-entropy over (N, C, d1..dk).

Both pick log_prob[n, target[n, d..], d..], weigh it by weight[target] (0 where the target is
ignore_index) and reduce as the reference does: none, sum, or sum(loss) / sum(weight) for mean.
Work happens in the widened dtype (float32 for 16-bit floats) and is rounded once at the end.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.tir import select
from kiln.topi.elemwise import wide_dtype
from kiln.topi.injective import checked_index
from kiln.topi.reduction import reduce_compute, softmax_parts
from kiln.topi.registry import ComputeError, register_compute


def _nll(attrs, logp: te.Tensor, target: te.Tensor, weight: te.Tensor | None, dtype: str) -> te.Tensor:
    """The loss of a widened (N, C, d..) log-probability tensor, in `dtype`."""
    if attrs.reduction not in ("none", "sum", "mean"):
        raise ComputeError(f"loss: unknown reduction {attrs.reduction!r}")
    w, c = logp.dtype, logp.shape[1]

    def ignored(i) -> tir.PrimExpr:
        if attrs.ignore_index is None:
            return tir.const(False, "bool")
        return tir.eq(target(*i), tir.const(attrs.ignore_index, target.dtype))

    def label(i) -> tir.PrimExpr:
        return select(ignored(i), tir.const(0, "int64"), checked_index(target(*i), c))

    def weigh(*i):
        one = tir.const(1, w) if weight is None else tir.cast(w, weight(label(i)))
        return select(ignored(i), tir.const(0, w), one)

    wt = te.compute(target.shape, weigh, name="loss_weight")
    loss = te.compute(target.shape, lambda *i: -logp(i[0], label(i), *i[1:]) * wt(*i), name="loss")
    if attrs.reduction == "none":
        return te.compute(loss.shape, lambda *i: tir.cast(dtype, loss(*i)), name="loss_out")
    s = _total(loss, "loss_sum")
    if attrs.reduction == "sum":
        return te.compute((), lambda: tir.cast(dtype, s()), name="loss_out")
    n = _total(wt, "loss_weight_sum")
    return te.compute((), lambda: tir.cast(dtype, s() / n()), name="loss_out")


def _total(t: te.Tensor, name: str) -> te.Tensor:
    """The sum of every element of t, as a 0-d tensor."""
    return reduce_compute(t, tuple(range(t.ndim)), False,
                          lambda load, ks, kidx: te.sum(load([k.var for k in ks]), ks), name)


@register_compute("reduce.negative_log_likelihood_loss")
def _negative_log_likelihood_loss(attrs, inputs, out_type, consts):
    x, target, weight = inputs[0], inputs[1], inputs[2]
    w = wide_dtype(x.dtype)
    xw = te.compute(x.shape, lambda *i: tir.cast(w, x(*i)), name="nll_in")
    return _nll(attrs, xw, target, weight, x.dtype)


@register_compute("reduce.softmax_cross_entropy_loss")
def _softmax_cross_entropy_loss(attrs, inputs, out_type, consts):
    """(loss, log_prob): log_prob is log_softmax over the class axis, kept wide for the loss."""
    x, target, weight = inputs[0], inputs[1], inputs[2]
    xw, m, s = softmax_parts(x, (1,))
    at = lambda t, i: t(i[0], tir.const(0), *i[2:])
    logp = te.compute(x.shape, lambda *i: xw(*i) - at(m, i) - te.log(at(s, i)), name="sce_log_prob")
    logp_out = te.compute(x.shape, lambda *i: tir.cast(x.dtype, logp(*i)), name="sce_log_prob_out")
    return _nll(attrs, logp, target, weight, x.dtype), logp_out

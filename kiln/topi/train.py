"""Optimizer steps (kiln/op/train.py): Adagrad, Adam and SGD with momentum, one elementwise compute
per output over X's shape, the gradient and states broadcast onto it.

The references do their arithmetic in X's dtype with the attributes as (weak) Python floats, and
compute the step's learning rate from R and T in float64 first; the computes follow that order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln import te, tir
from kiln.tir import PrimExpr
from kiln.topi.registry import broadcast_load, register_compute

F64 = "float64"
StepFn = Callable[..., tuple[PrimExpr, ...]]


def _scalar(t: te.Tensor) -> PrimExpr:
    """The one element of R or T (a scalar or a one-element vector)."""
    return t(*(tir.const(0) for _ in range(t.ndim)))


def optimizer_outputs(inputs: Sequence[te.Tensor], roles: int, out_roles: Sequence[int], step: StepFn,
                      name: str) -> tuple[te.Tensor, ...]:
    """One compute per (output role, tensor): step(i, r, t, x, g, states...) gives every role's new value
    at X's index i; role k of the result is output group k (0 = X_new)."""
    r, t, *rest = inputs
    n = len(rest) // roles
    outs = []
    for role_pos, role in enumerate(out_roles):
        for k in range(n):
            group = [rest[j * n + k] for j in range(roles)]
            x = group[0]

            def f(*i, group=group, role_pos=role_pos):
                vals = [broadcast_load(v, i) for v in group]
                return tir.cast(group[0].dtype, step(_scalar(r), _scalar(t), *vals)[role_pos])

            outs.append(te.compute(x.shape, f, name=f"{name}_out{role}_{k}"))
    return tuple(outs)


@register_compute("train.adagrad")
def _adagrad(attrs, inputs, out_type, consts):
    def step(r, t, x, g, h):
        lr = tir.cast(x.dtype, tir.cast(F64, r) / (tir.const(1.0, F64) + tir.cast(F64, t) * attrs.decay_factor))
        g = attrs.norm_coefficient * x + g
        h_new = h + g * g
        return x - lr * g / (te.sqrt(h_new) + attrs.epsilon), h_new

    return optimizer_outputs(inputs, 3, (0, 2), step, "adagrad")


@register_compute("train.adam")
def _adam(attrs, inputs, out_type, consts):
    def step(r, t, x, g, v, h):
        g = attrs.norm_coefficient * x + g
        v_new = attrs.alpha * v + (1 - attrs.alpha) * g
        h_new = attrs.beta * h + (1 - attrs.beta) * g * g
        tf, r64 = tir.cast(F64, t), tir.cast(F64, r)
        scaled = r64 * te.sqrt(1.0 - te.power(tir.const(attrs.beta, F64), tf)) \
            / (1.0 - te.power(tir.const(attrs.alpha, F64), tf))
        lr = tir.cast(x.dtype, tir.select(t > 0, scaled, r64))
        x_new = x - lr * (v_new / (te.sqrt(h_new) + attrs.epsilon))
        return (1 - attrs.norm_coefficient_post) * x_new, v_new, h_new

    return optimizer_outputs(inputs, 4, (0, 2, 3), step, "adam")


@register_compute("train.momentum")
def _momentum(attrs, inputs, out_type, consts):
    def step(r, t, x, g, v):
        g = attrs.norm_coefficient * x + g
        beta = tir.select(t > 0, tir.const(attrs.beta, x.dtype), tir.const(1.0, x.dtype))
        v_new = attrs.alpha * v + beta * g
        upd = g + attrs.alpha * v_new if attrs.mode == "nesterov" else v_new
        return x - tir.cast(x.dtype, r) * upd, v_new

    return optimizer_outputs(inputs, 3, (0, 2), step, "momentum")

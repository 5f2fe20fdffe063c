"""Computes of the fast-math operators (kiln.op.fast_math): the vectorizable expressions of
kiln.topi.vmath, in float32 (narrow floats are widened and rounded once at the end, as the
references do)."""

from __future__ import annotations

from collections.abc import Callable

import kiln.op.fast_math  # noqa: F401  (defines the operators)
from kiln import tir
from kiln.tir.expr import PrimExpr
from kiln.topi.elemwise import map_compute
from kiln.topi.registry import register_compute
from kiln.topi.vmath import erf_f32, exp_f32, tanh_f32

F32 = "float32"


def _c(v: float) -> PrimExpr:
    return tir.const(v, F32)


def _gelu(attrs, x: PrimExpr) -> PrimExpr:
    if attrs.approximate == "tanh":
        inner = _c(0.79788456080286536) * (x + _c(0.044715) * (x * x * x))
        return _c(0.5) * x * (_c(1.0) + tanh_f32(inner))
    return _c(0.5) * x * (_c(1.0) + erf_f32(x * _c(0.70710678118654752)))


FAST_COMPUTES: dict[str, Callable] = {
    "math.fast_exp": lambda a, x: exp_f32(x),
    "math.fast_tanh": lambda a, x: tanh_f32(x),
    "math.fast_erf": lambda a, x: erf_f32(x),
    "nn.fast_sigmoid": lambda a, x: _c(1.0) / (_c(1.0) + exp_f32(-x)),
    "nn.fast_gelu": _gelu,
}


def _register(name: str, fn: Callable) -> None:
    def compute(attrs, inputs, out_type, consts):
        x = inputs[0]
        return map_compute(x, lambda v: tir.cast(x.dtype, fn(attrs, tir.cast(F32, v))), name.split(".")[1])

    register_compute(name)(compute)


for _name, _fn in FAST_COMPUTES.items():
    _register(_name, _fn)

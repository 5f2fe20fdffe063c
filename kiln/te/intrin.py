"""Math intrinsics, casts and selects for te compute bodies (they lower to tir calls)."""

from __future__ import annotations

from kiln import tir
from kiln.tir.expr import PrimExpr, cast, select  # noqa: F401

_UNARY = ("exp", "log", "sqrt", "tanh", "erf", "sigmoid", "fabs", "floor", "ceil", "round", "sin", "cos",
          "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1",
          "nearbyint", "trunc", "isnan", "isinf")


def _unary(name: str):
    def f(x: PrimExpr) -> PrimExpr:
        dtype = "bool" if name in ("isnan", "isinf") else None
        return tir.call(name, x, dtype=dtype)

    f.__name__ = name
    f.__doc__ = f"Elementwise {name} (a tir intrinsic)."
    return f


for _n in _UNARY:
    globals()[_n] = _unary(_n)


def power(x: PrimExpr, y: PrimExpr) -> PrimExpr:
    return tir.call("pow", x, y)


def if_then_else(cond: PrimExpr, t, f) -> PrimExpr:
    return select(cond, t, f)


__all__ = list(_UNARY) + ["power", "if_then_else", "cast", "select"]

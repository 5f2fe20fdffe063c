"""The integer value of a buffer dim or stride given the size variables bound so far: how a kernel's
caller (argument checks, the runtime library's capacities, the executor's output allocation) sizes
arrays from tir shape expressions."""

from __future__ import annotations

from kiln.tir import expr as E

_ARITH = {E.Add: lambda x, y: x + y, E.Sub: lambda x, y: x - y, E.Mul: lambda x, y: x * y,
          E.FloorDiv: lambda x, y: x // y, E.FloorMod: lambda x, y: x % y,
          E.Min: min, E.Max: max}


def shape_value(e: E.PrimExpr, bound: dict[E.Var, int]) -> int | None:
    """The value of a shape expression, or None where it uses an unbound variable."""
    if isinstance(e, E.IntImm):
        return e.value
    if isinstance(e, E.Var):
        return bound.get(e)
    if type(e) in _ARITH:
        a, b = shape_value(e.a, bound), shape_value(e.b, bound)
        return None if a is None or b is None else _ARITH[type(e)](a, b)
    return None

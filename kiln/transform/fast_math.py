"""FastMath: trade a few ulps for speed by calling the fast approximations of kiln.op.fast_math.

Only run when asked (opt_level 4, e.g. `PassContext(required=["fast-math"])`): results change
within the error each fast op states. float64 is never touched.
"""

from __future__ import annotations

from collections.abc import Callable

import kiln.op.fast_math  # noqa: F401  (registers the fast ops)
from kiln.ir.expr import Call, Expr, Function
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import rewrite
from kiln.op.registry import OpDef, get_op
from kiln.transform.infra import PassContext, function_pass

# the fast ops compute in float32 (narrow floats round once at the end): as accurate as the
# exact op for float16/bfloat16, so those are rewritten too
FAST_MATH_DTYPES = ("float32", "float16", "bfloat16")


def _same_attrs(fast: str) -> Callable[[Call], Expr]:
    return lambda call: Call(get_op(fast), call.args, call.attrs, call.name)


# exact op name -> rewrite of a call of it (the table of named rules)
FAST_MATH_RULES: dict[str, Callable[[Call], Expr]] = {
    "math.exp": _same_attrs("math.fast_exp"),
    "math.tanh": _same_attrs("math.fast_tanh"),
    "math.erf": _same_attrs("math.fast_erf"),
    "nn.sigmoid": _same_attrs("nn.fast_sigmoid"),
    "nn.gelu": _same_attrs("nn.fast_gelu"),
}


def _fast(old: Expr, new: Expr) -> Expr:
    if not (isinstance(new, Call) and isinstance(new.op, OpDef)):
        return new
    rule = FAST_MATH_RULES.get(new.op.name)
    t = new.type
    if rule is None or not isinstance(t, TensorType) or t.dtype not in FAST_MATH_DTYPES:
        return new
    return rule(new)


@function_pass("fast-math", opt_level=4)
def fast_math(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Replace exp/tanh/erf/sigmoid/gelu on float32 (and narrower floats) by their fast forms."""
    return rewrite(fn, _fast)

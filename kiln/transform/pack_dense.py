"""PackDense: a matrix product with a constant 2-D B becomes `linalg.dense_packed` over B packed
once, at compile time, into column panels [N/nr, K, nr] (zero-padded past N).

The x86 dense schedule walks B one nr-wide panel at a time, so reading it in panel order is
contiguous whatever B's original layout (Gemm's transB reads it across rows). Gemm's alpha, beta
and C become elementwise ops after the product, which FuseOps fuses into its store.
"""

from __future__ import annotations

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, Function, is_absent
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import rewrite
from kiln.op.registry import OpDef, get_op
from kiln.transform.infra import PassContext, function_pass
from kiln.transform.layout_rules import transform

PACK_DTYPES = ("float32", "float64")
VECTORS_PER_PANEL = 2  # nr = two SIMD vectors: a 6 x nr tile then holds 12 vector accumulators


def panel_width(dtype: str, ctx: PassContext) -> int:
    """nr: PassContext.config["pack_dense.nr"] when given, else two of the target's vectors of `dtype`."""
    given = ctx.config.get("pack_dense.nr")
    if given is not None:
        return int(given)
    return VECTORS_PER_PANEL * ctx.target.vector_bytes // (4 if dtype == "float32" else 8)


def _static_2d(e: Expr) -> tuple[int, int] | None:
    t = e.type
    if not (isinstance(e, Constant) and isinstance(t, TensorType) and t.shape is not None and len(t.shape) == 2):
        return None
    return t.shape  # type: ignore[return-value]


def _packable(call: Call) -> bool:
    t, a = call.type, call.args[0].type
    return (isinstance(t, TensorType) and t.dtype in PACK_DTYPES and isinstance(a, TensorType)
            and a.dtype == t.dtype and a.shape is not None and len(a.shape) >= 2)


def pack_mat_mul(call: Call, nr: int) -> Expr | None:
    b = call.args[1]
    shape = _static_2d(b)
    if shape is None or not _packable(call):
        return None
    return get_op("linalg.dense_packed")(call.args[0], transform(b, "IO", f"OI{nr}o"), units=shape[1])


def pack_gemm(call: Call, nr: int) -> Expr | None:
    a = call.attrs
    b = call.args[1]
    shape = _static_2d(b)
    if shape is None or a.transA or not _packable(call):
        return None
    units = shape[0] if a.transB else shape[1]
    y = get_op("linalg.dense_packed")(call.args[0], transform(b, "OI" if a.transB else "IO", f"OI{nr}o"),
                                      units=units)
    dtype = call.type.dtype  # type: ignore[union-attr]
    if a.alpha != 1.0:
        y = get_op("math.mul")(y, Constant(_scalar(a.alpha, dtype)))
    c = call.args[2] if len(call.args) > 2 else None
    if c is not None and not is_absent(c):
        if a.beta != 1.0:
            c = get_op("math.mul")(c, Constant(_scalar(a.beta, dtype)))
        y = get_op("math.add")(y, c)
    return y


def _scalar(v: float, dtype: str) -> np.ndarray:
    return np.asarray(v, dtype=dtype)


# op name -> rewrite of a call of it, given the panel width
PACK_DENSE_RULES = {"linalg.mat_mul": pack_mat_mul, "linalg.gemm": pack_gemm}


@function_pass("pack-dense", opt_level=2, config=("pack_dense.nr",))
def pack_dense(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """mat_mul/gemm with a constant 2-D B (float32/float64) -> dense_packed over the panel-packed B."""

    def post(old: Expr, new: Expr) -> Expr:
        if not (isinstance(new, Call) and isinstance(new.op, OpDef)):
            return new
        rule = PACK_DENSE_RULES.get(new.op.name)
        if rule is None or not isinstance(new.type, TensorType):
            return new
        out = rule(new, panel_width(new.type.dtype, ctx))
        return new if out is None else out

    return rewrite(fn, post)

"""EliminateCommonSubexpr: one node for each distinct (operator, attributes, arguments)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir.attrs import attr_items
from kiln.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.visitor import rewrite
from kiln.transform.infra import PassContext, function_pass

SMALL_CONSTANT = 64  # constants up to this many elements are merged by value


def _attrs_key(attrs: Any) -> tuple:
    out = []
    for k, v in attr_items(attrs):
        if isinstance(v, np.ndarray):
            v = (str(v.dtype), v.shape, v.tobytes()) if v.dtype != object else (v.shape, tuple(v.ravel().tolist()))
        out.append((k, repr(v) if not isinstance(v, (int, float, str, tuple, type(None))) else v))
    return (type(attrs).__name__, tuple(out))


def _key(e: Expr) -> tuple | None:
    if isinstance(e, Call) and isinstance(e.op, Op) and e.op.pure:
        return ("call", e.op.name, _attrs_key(e.attrs), tuple(id(a) for a in e.args))
    if isinstance(e, Tuple):
        return ("tuple", tuple(id(f) for f in e.fields))
    if isinstance(e, TupleGetItem):
        return ("get", id(e.tuple_value), e.index)
    if isinstance(e, Constant) and e.data.size <= SMALL_CONSTANT and e.data.dtype != object:
        return ("const", str(e.data.dtype), e.data.shape, e.data.tobytes())  # NOTE: ml_dtypes all have .str "|V1"
    return None


@function_pass("eliminate-common-subexpr", opt_level=2)
def eliminate_common_subexpr(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Merge structurally identical pure computations (random ops are never merged)."""
    table: dict[tuple, Expr] = {}

    def post(old: Expr, new: Expr) -> Expr:
        k = _key(new)
        if k is None:
            return new
        return table.setdefault(k, new)

    return rewrite(fn, post)

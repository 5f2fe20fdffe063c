"""FoldConstant: evaluate what is known at compile time.

Every call whose inputs are all constants is replaced by its value (computed with the operator's
reference); constants propagate through lets, tuples and `if`s with a constant condition; and
shape queries of statically shaped tensors fold to constants, so Shape -> Gather -> Concat ->
Reshape chains become static reshapes. Random operators and calls that take functions (loops)
are never folded. Folding is an optimization: a call whose value would not fit the memory bound
(kiln.ir.sizes) stays a call, and whether it can run is decided where it runs, which says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.errors import MemoryLimitError, ShapeError
from kiln.ir.expr import Call, Constant, Expr, Function, If, Let, Op, Tuple, TupleGetItem, is_absent
from kiln.ir.module import IRModule
from kiln.ir.sizes import fits
from kiln.ir.types import TensorType
from kiln.ir.visitor import rewrite
from kiln.op.interpreter import run_op
from kiln.transform.basic import substitute
from kiln.transform.infra import PassContext, function_pass

DEFAULT_MAX_ELEMENTS = 1 << 24  # PassContext.config["fold_constant.max_elements"]


def _static_shape(e: Expr) -> tuple[int, ...] | None:
    t = e.type
    if isinstance(t, TensorType) and t.is_static:
        return tuple(t.shape)  # type: ignore[arg-type]
    return None


def _fold_shape(call: Call) -> Expr | None:
    shape = _static_shape(call.args[0])
    if shape is None:
        return None
    start = getattr(call.attrs, "start", 0) or 0
    end = getattr(call.attrs, "end", None)
    return Constant(np.array(shape[slice(start, end)], dtype=np.int64))


def _fold_size(call: Call) -> Expr | None:
    shape = _static_shape(call.args[0])
    return None if shape is None else Constant(np.array(int(np.prod(shape)), dtype=np.int64))


def _fold_constant_of_shape(call: Call) -> Expr | None:
    """A splat folds to a broadcast view: no memory, however large the weight it generates."""
    if not isinstance(call.args[0], Constant):
        return None
    value = call.attrs.value
    fill = np.zeros((), np.float32) if value is None else value.reshape(-1)[:1].reshape(())
    shape = tuple(int(d) for d in call.args[0].data.reshape(-1))
    if not fits(shape, fill.dtype):  # the view costs nothing, but a kernel or weight that reads it holds all of it
        return None
    return Constant(np.broadcast_to(fill, shape))


# op name -> rule tried before generic evaluation; returns the folded expression or None
FOLD_RULES: dict[str, Callable[[Call], Expr | None]] = {
    "tensor.shape": _fold_shape,
    "tensor.size": _fold_size,
    "tensor.constant_of_shape": _fold_constant_of_shape,
}


def _foldable(call: Call) -> bool:
    op = call.op
    return (isinstance(op, Op) and op.pure
            and all(isinstance(a, Constant) or is_absent(a) for a in call.args))


def _as_expr(value: Any) -> Expr | None:
    if isinstance(value, np.ndarray):
        return Constant(value)
    if isinstance(value, np.generic):
        return Constant(np.asarray(value))
    if isinstance(value, tuple) and value and all(isinstance(v, (np.ndarray, np.generic)) for v in value):
        return Tuple(tuple(Constant(np.asarray(v)) for v in value))
    return None  # sequences, optionals: left to run time


def fold_expr(root: Expr, max_elements: int = DEFAULT_MAX_ELEMENTS) -> Expr:
    """Fold `root` to a fixpoint (a let bound to a constant is substituted, then folded again)."""
    while True:
        out = rewrite(root, lambda old, new: _fold_node(new, max_elements))
        if out is root:
            return out
        root = out


def _fold_node(new: Expr, max_elements: int) -> Expr:
    if isinstance(new, Call) and isinstance(new.op, Op):
        rule = FOLD_RULES.get(new.op.name)
        folded = rule(new) if rule else None
        if folded is not None or not _foldable(new):
            return folded or new
        out_t = new.type
        if isinstance(out_t, TensorType) and out_t.is_static and math.prod(out_t.shape) > max_elements:
            return new
        try:
            with np.errstate(all="ignore"):
                value = run_op(new.op, new.attrs, [() if is_absent(a) else a.data for a in new.args], new.name, out_t)
        except (MemoryLimitError, ShapeError):
            return new
        return _as_expr(value) or new
    if isinstance(new, TupleGetItem) and isinstance(new.tuple_value, Tuple):
        return new.tuple_value.fields[new.index]
    if isinstance(new, If) and isinstance(new.cond, Constant):
        return new.then_branch if bool(new.cond.data.reshape(-1)[0]) else new.else_branch
    if isinstance(new, Let) and isinstance(new.value, Constant):
        return substitute(new.body, {id(new.var): new.value})
    return new


@function_pass("fold-constant", opt_level=1, config=("fold_constant.max_elements",))
def fold_constant(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Replace every call whose inputs are constants by its value; fold shape queries."""
    limit = int(ctx.config.get("fold_constant.max_elements", DEFAULT_MAX_ELEMENTS))
    return fold_expr(fn, limit)

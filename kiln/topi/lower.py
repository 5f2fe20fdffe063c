"""Graph to te: a function of operator calls (a fused Primitive, or a small main) becomes te
tensors, each Call through its registered compute.

Parameters become placeholders (a named symbolic dim is one shared Var); a Constant becomes a
placeholder too, bound to its data, and its value also reaches computes as `consts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln import te, tir
from kiln.ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var, is_absent
from kiln.ir.types import SizeVar, TensorType
from kiln.op.registry import OpDef
from kiln.topi.registry import ComputeError, compute_call


@dataclass
class Lowered:
    params: list[te.Tensor]
    constants: dict[te.Tensor, np.ndarray]
    outputs: list[te.Tensor]
    sizes: dict[str, tir.Var] = field(default_factory=dict)  # symbolic dim name -> its Var


def lower_function(fn: Function) -> Lowered:
    """te tensors of fn's results; ComputeError when a call has no compute or cannot be lowered."""
    low = Lowered([], {}, [])
    memo: dict[int, object] = {}

    def placeholder(t, name: str) -> te.Tensor:
        if not isinstance(t, TensorType) or t.shape is None:
            raise ComputeError(f"{name}: only tensors of known rank lower to te, got {t}")
        dims = [low.sizes.setdefault(d.name, tir.Var(d.name)) if isinstance(d, SizeVar) and d.name != "?"
                else tir.Var("any") if isinstance(d, SizeVar) else d for d in t.shape]
        return te.placeholder(dims, t.dtype, name)

    def visit(e: Expr):
        if id(e) in memo:
            return memo[id(e)]
        if isinstance(e, Var):
            out = placeholder(e.type, e.name)
        elif isinstance(e, Constant):
            out = placeholder(e.type, "const")
            low.constants[out] = e.data
        elif isinstance(e, Tuple):
            out = tuple(visit(f) for f in e.fields)
        elif isinstance(e, TupleGetItem):
            out = visit(e.tuple_value)[e.index]
        elif isinstance(e, Call) and isinstance(e.op, OpDef):
            ins = [None if is_absent(a) else visit(a) for a in e.args]
            consts = [a.data if isinstance(a, Constant) else None for a in e.args]
            outs = compute_call(e.op.name, e.attrs, ins, e.type, consts)
            out = outs[0] if isinstance(e.type, TensorType) else outs
        else:
            raise ComputeError(f"cannot lower {type(e).__name__} to te")
        memo[id(e)] = out
        return out

    low.params = [visit(p) for p in fn.params]
    result = visit(fn.body)
    low.outputs = list(_flatten(result))
    return low


def _flatten(v):
    if isinstance(v, tuple):
        for x in v:
            yield from _flatten(x)
    else:
        yield v

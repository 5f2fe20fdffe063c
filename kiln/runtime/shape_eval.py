"""Output shapes of a fused group from its actual arguments, without running it.

Some output sizes depend on input *values* (Reshape or Tile by a shape tensor, ConstantOfShape,
Range): the kernel cannot bind them from input shapes, but the operators' type relations can, given
those values. The group's body is re-typed bottom-up with the concrete argument shapes; small values
(shapes, scalars) are evaluated by the references on the way, so a size computed inside the group
(cast, arithmetic, then range) is known too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir.dtype import from_numpy
from kiln.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var, is_absent
from kiln.ir.types import TensorType, TupleType, Type
from kiln.ir.visitor import post_order
from kiln.op.interpreter import run_op

SMALL = 64  # values up to this many elements are evaluated (shape and size inputs are this small)


def output_shapes(fn: Function, args: list[np.ndarray]) -> list[tuple[int, ...]]:
    """The concrete shape of each output of Primitive function `fn` called on `args`."""
    types: dict[int, Type] = {}
    values: dict[int, Any] = {}
    for p, a in zip(fn.params, args):
        types[id(p)] = TensorType(a.shape, from_numpy(a.dtype))
        if a.size <= SMALL:
            values[id(p)] = a
    for e in post_order(fn.body):
        if id(e) in types:
            continue
        if isinstance(e, Constant) or is_absent(e):
            types[id(e)] = e.type
            if isinstance(e, Constant) and e.data.size <= SMALL:
                values[id(e)] = e.data
        elif isinstance(e, Call) and isinstance(e.op, Op):
            types[id(e)], value = _call(e, types, values)
            if value is not None:
                values[id(e)] = value
        elif isinstance(e, TupleGetItem):
            types[id(e)] = types[id(e.tuple_value)].fields[e.index]
        elif isinstance(e, Tuple):
            types[id(e)] = TupleType(tuple(types[id(f)] for f in e.fields))
        else:
            raise KilnError(f"cannot find the output shapes of a group holding {type(e).__name__}")
    out = types[id(fn.body)]
    shapes = [t.shape for t in (out.fields if isinstance(out, TupleType) else (out,))]
    if not all(isinstance(d, int) for s in shapes for d in s):
        raise KilnError(f"output shapes {shapes} still depend on values larger than {SMALL} elements")
    return [tuple(s) for s in shapes]


def _call(e: Call, types: dict[int, Type], values: dict[int, Any]) -> tuple[Type, Any]:
    """(type, value when all arguments are known and the result is small) of one operator call."""
    args: list[Expr] = []
    for k, a in enumerate(e.args):
        if is_absent(a):
            args.append(a)
        elif id(a) in values and isinstance(values[id(a)], np.ndarray):
            args.append(Constant(values[id(a)]))
        else:
            args.append(Var(f"a{k}", types[id(a)]))
    t = e.op.infer_type(tuple(args), e.attrs)
    known = all(is_absent(a) or isinstance(a, Constant) for a in args)
    if known and e.op.pure and isinstance(t, TensorType) and t.shape is not None \
            and all(isinstance(d, int) for d in t.shape) and int(np.prod(t.shape)) <= SMALL:
        return t, np.asarray(run_op(e.op, e.attrs, [() if is_absent(a) else a.data for a in args], e.name))
    return t, None

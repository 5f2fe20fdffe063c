"""Operators that are not loop nests (sorting, selection, data-dependent output sizes): one
ExternOp each, naming a function of Kiln's runtime library; their numpy versions (the operators'
references) are registered at the end of this file for kiln/te/eval.py. Attributes travel as scalar
arguments; a data-dependent dim is a fresh Var that the runtime function binds.
"""

from __future__ import annotations

import math

import numpy as np

from kiln import te, tir
from kiln.op import get_op
from kiln.te.eval import EXTERN_FUNCS
from kiln.te.tensor import ExternOp
from kiln.topi.registry import out_dims, register_compute, tensor_type


def extern(name: str, func: str, inputs, out_type, n_out: int, scalars=(), known=None) -> tuple[te.Tensor, ...]:
    """`known` maps an output to its shape when the type leaves it open but the input shapes fix it."""
    shapes = tuple((known or {}).get(k) or out_dims(out_type, inputs, k) for k in range(n_out))
    dtypes = tuple(tensor_type(out_type, k).dtype for k in range(n_out))
    op = ExternOp(name, tuple(inputs), shapes, dtypes, func, tuple(tir.const(s) for s in scalars))
    return tuple(op.output(k) for k in range(n_out))


def _absent(dtype: str) -> te.Tensor:
    """An empty tensor standing for an omitted optional input of an extern function."""
    return te.compute((0,), lambda i: tir.const(0, dtype), name="absent")


@register_compute("tensor.top_k")
def _top_k(attrs, inputs, out_type, consts):
    x = inputs[0]
    return extern("top_k", "kiln_top_k", inputs[:2], out_type, 2, (attrs.axis % x.ndim, attrs.largest, attrs.sorted))


@register_compute("tensor.unique")
def _unique(attrs, inputs, out_type, consts):
    x = inputs[0]
    axis = 0 if attrs.axis is None else attrs.axis % x.ndim
    n = x.shape[axis] if attrs.axis is not None else math.prod(x.shape[1:], start=x.shape[0]) if x.ndim else 1
    return extern("unique", "kiln_unique", inputs[:1], out_type, 4, (axis, attrs.axis is not None, attrs.sorted),
                  known={2: (tir.const(n) if isinstance(n, int) else n,)})  # inverse indices: one per element


@register_compute("tensor.non_zero")
def _non_zero(attrs, inputs, out_type, consts):
    return extern("non_zero", "kiln_non_zero", inputs[:1], out_type, 1)


@register_compute("vision.non_max_suppression")
def _nms(attrs, inputs, out_type, consts):
    dtypes = ("float32", "float32", "int64", "float32", "float32")
    ins = [x if x is not None else _absent(d) for x, d in zip(inputs, dtypes)]
    return extern("non_max_suppression", "kiln_non_max_suppression", ins, out_type, 1, (attrs.center_point_box,))


def _op_ref(name: str, attrs_of):
    """The te evaluator's version of an extern: operator `name`'s reference, attrs rebuilt from the scalars.
    An omitted optional input arrives as an empty array."""

    def f(ins: list[np.ndarray], scalars: list) -> tuple[np.ndarray, ...]:
        op = get_op(name)
        out = op.reference(attrs_of(op.attrs_type, *scalars), *ins)
        return tuple(out) if isinstance(out, tuple) else (out,)

    return f


EXTERN_FUNCS.update({
    "kiln_top_k": _op_ref("tensor.top_k", lambda A, axis, largest, srt: A(int(axis), int(largest), int(srt))),
    "kiln_unique": _op_ref("tensor.unique", lambda A, axis, has_axis, srt: A(int(axis) if has_axis else None,
                                                                               int(srt))),
    "kiln_non_zero": _op_ref("tensor.non_zero", lambda A: None),
    "kiln_non_max_suppression": _op_ref("vision.non_max_suppression", lambda A, cpb: A(int(cpb))),
    "kiln_det": _op_ref("linalg.det", lambda A: None),
    "kiln_dropout": _op_ref("nn.dropout", lambda A, seed: A(int(seed))),
})

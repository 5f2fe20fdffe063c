"""ONNX converters for random generators (kiln/op/random.py): `dtype` codes become dtype names."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to
from kiln.ir import dtype as dt
from kiln.ir.expr import Expr

_OPS = {"RandomNormal": "random.random_normal", "RandomNormalLike": "random.random_normal_like",
        "RandomUniform": "random.random_uniform", "RandomUniformLike": "random.random_uniform_like",
        "Bernoulli": "random.bernoulli", "Multinomial": "random.multinomial"}


@converter(*_OPS)
def _random(node: Node) -> Expr:
    op = _OPS[node.op_type]
    code = node.attrs.get("dtype")
    dtype = {} if code is None else {"dtype": dt.from_onnx(code)}
    return call(op, node, node.inputs, onnx_attrs_to(op, node, drop=("dtype",), **dtype))

"""ONNX converters for the elementwise family (kiln/op/elemwise.py)."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, simple
from kiln.ir import dtype as dt
from kiln.op.elemwise import CastAttrs

simple("Add", "math.add")
simple("Relu", "nn.relu")


@converter("Cast")
def _cast(node: Node):
    to = dt.from_onnx(node.attrs["to"])
    return call("math.cast", node, node.inputs, CastAttrs(to=to, saturate=node.attrs.get("saturate", 1),
                                                          round_mode=node.attrs.get("round_mode", "up")))

"""ONNX converters for kiln/op/nn.py: convolutions, pooling, unpooling, dropout."""

from __future__ import annotations

import numpy as np

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, outputs, simple
from kiln.ir.expr import Constant
from kiln.op.elemwise import CastAttrs

simple("Conv", "nn.conv")
simple("ConvTranspose", "nn.conv_transpose")
simple("ConvInteger", "nn.conv_integer")
simple("DeformConv", "nn.deform_conv")
simple("MaxPool", "nn.max_pool")
simple("AveragePool", "nn.average_pool")
simple("GlobalAveragePool", "nn.global_average_pool")
simple("GlobalMaxPool", "nn.global_max_pool")
simple("MaxUnpool", "nn.max_unpool")


@converter("LpPool", "GlobalLpPool")
def _lp_pool(node: Node):
    """Opset 1 gave p as a float; later opsets as an int."""
    op = "nn.lp_pool" if node.op_type == "LpPool" else "nn.global_lp_pool"
    p = node.attrs.get("p", 2)
    if p != int(p):
        raise node.error(f"p must be a whole number, got {p}")
    return call(op, node, node.inputs, onnx_attrs_to(op, node, p=int(p)))


@converter("Dropout")
def _dropout(node: Node):
    """Before opset 12 ratio was an attribute; before opset 7 training was `is_test=0` (the
    default); before opset 10 the mask had the data's dtype instead of bool."""
    if node.opset >= 12:
        return outputs(call("nn.dropout", node, node.inputs, onnx_attrs_to("nn.dropout", node)),
                       node.num_outputs)
    ratio = Constant(np.array(node.attrs.get("ratio", 0.5), np.float32))
    training = Constant(np.array(node.opset < 7 and node.attrs.get("is_test", 0) == 0))
    attrs = onnx_attrs_to("nn.dropout", node, drop=("ratio", "is_test", "consumed_inputs"))
    res = outputs(call("nn.dropout", node, [node.inputs[0], ratio, training], attrs), node.num_outputs)
    if node.opset < 10 and len(res) > 1:
        res[1] = call("math.cast", node, [res[1]], CastAttrs(to=node.inputs[0].type.dtype))
    return res


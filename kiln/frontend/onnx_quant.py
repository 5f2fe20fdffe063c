"""ONNX converters for kiln/op/quant.py."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, outputs, simple
from kiln.ir import dtype as dt


def _dtype_attr(node: Node, name: str) -> str | None:
    """An optional ONNX dtype-enum attribute as a Kiln dtype name (0 or absent: None)."""
    code = node.attrs.get(name, 0)
    return dt.from_onnx(code) if code else None


@converter("QuantizeLinear")
def _quantize_linear(node: Node):
    attrs = onnx_attrs_to("quant.quantize_linear", node, output_dtype=_dtype_attr(node, "output_dtype"),
                          precision=_dtype_attr(node, "precision"))
    return call("quant.quantize_linear", node, node.inputs, attrs)


@converter("DequantizeLinear")
def _dequantize_linear(node: Node):
    attrs = onnx_attrs_to("quant.dequantize_linear", node, output_dtype=_dtype_attr(node, "output_dtype"))
    return call("quant.dequantize_linear", node, node.inputs, attrs)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(node: Node):
    return outputs(call("quant.dynamic_quantize_linear", node, node.inputs), node.num_outputs)


simple("QLinearMatMul", "quant.qlinear_matmul")
simple("QLinearConv", "quant.qlinear_conv")

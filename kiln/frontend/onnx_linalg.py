"""ONNX converters for kiln/op/linalg.py."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, simple

simple("MatMul", "linalg.mat_mul")
simple("MatMulInteger", "linalg.mat_mul_integer")
simple("Einsum", "linalg.einsum")
simple("Det", "linalg.det")


@converter("Gemm")
def _gemm(node: Node):
    """Gemm < 7 has a `broadcast` flag; C broadcasting unidirectionally covers both of its values."""
    return call("linalg.gemm", node, node.inputs, onnx_attrs_to("linalg.gemm", node, drop=("broadcast",)))

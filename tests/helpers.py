"""Small builders for ONNX models in tests."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def model(nodes, inputs, outputs, inits=(), opset: int = 21, ir_version: int = 10) -> onnx.ModelProto:
    """A checked ModelProto; inputs/outputs are (name, elem_type, shape) triples."""
    g = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    return m


F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL

"""Tiny models for the serving tests: an MLP, and one model with an input of every KServe datatype
that Kiln compiles (each output doubles or negates its input, so every dtype travels both ways)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from kiln.models.mlp import mlp

MLP_SIZES = (8, 16, 4)
DTYPES = {  # KServe datatype -> ONNX element type
    "BOOL": TensorProto.BOOL, "UINT8": TensorProto.UINT8, "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32, "UINT64": TensorProto.UINT64, "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16, "INT32": TensorProto.INT32, "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16, "FP32": TensorProto.FLOAT, "FP64": TensorProto.DOUBLE,
}


def tiny_mlp(batch: int | str = 2) -> onnx.ModelProto:
    return mlp(batch=batch, sizes=MLP_SIZES)


def every_dtype() -> onnx.ModelProto:
    """Input `x_<DATATYPE>` of shape [2, 3]; output `y_<DATATYPE>`: Not for BOOL, x + x otherwise."""
    nodes, inputs, outputs = [], [], []
    for name, elem in DTYPES.items():
        x, y = f"x_{name}", f"y_{name}"
        inputs.append(helper.make_tensor_value_info(x, elem, [2, 3]))
        outputs.append(helper.make_tensor_value_info(y, elem, [2, 3]))
        nodes.append(helper.make_node("Not", [x], [y]) if name == "BOOL" else helper.make_node("Add", [x, x], [y]))
    graph = helper.make_graph(nodes, "every_dtype", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

"""Tiny models for the tuning tests: a few fused groups with knobs, cheap to compile and time."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from kiln.models.onnx_builder import GraphBuilder


def tiny_model(seed: int = 0, width: int = 64) -> onnx.ModelProto:
    """relu(x * w + b) then a softmax over the last axis: an elementwise group and a reduction group."""
    g = GraphBuilder(seed)
    w = g.weight("w", (width,))
    b = g.weight("b", (width,), 0.1)
    y = g.node("Mul", ["x", w], "mul")
    y = g.node("Add", [y, b], "add")
    y = g.node("Relu", [y], "relu")
    y = g.node("Softmax", [y], "softmax", axis=-1)
    return g.model("tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                   [helper.make_tensor_value_info(y, TensorProto.FLOAT, [4, width])])


def reduce_model(seed: int = 0) -> onnx.ModelProto:
    """A mean over the leading axis (vectorized across the columns: the reduce schedule's run knob)
    and a max pool."""
    g = GraphBuilder(seed)
    m = g.node("ReduceMean", ["x"], "mean", axes=[0], keepdims=1)
    p = g.node("MaxPool", ["img"], "pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    return g.model("reduce", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 200]),
                              helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 20, 20])],
                   [helper.make_tensor_value_info(m, TensorProto.FLOAT, [1, 200]),
                    helper.make_tensor_value_info(p, TensorProto.FLOAT, [1, 3, 20, 20])])

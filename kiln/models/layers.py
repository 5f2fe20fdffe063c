"""Layers shared by the wide benchmark set's builders (kiln.models.wide): convolutions with batch norm
and an activation, a classifier head, and the graph's inputs and outputs, written the way a PyTorch
export writes them so the compiler sees what users deploy."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from kiln.models.onnx_builder import GraphBuilder


def conv(g: GraphBuilder, x: str, cin: int, cout: int, k: int, name: str, stride: int = 1, groups: int = 1,
         bias: bool = True, spatial: int = 2, dilation: int = 1, pad: int | None = None) -> str:
    """A `spatial`-D convolution, padded by default to keep the size at stride 1 (dilation included)."""
    w = g.weight(f"{name}.weight", (cout, cin // groups) + (k,) * spatial)
    inputs = [x, w, g.weight(f"{name}.bias", (cout,), 0.01)] if bias else [x, w]
    pad = dilation * (k - 1) // 2 if pad is None else pad
    return g.node("Conv", inputs, name, kernel_shape=[k] * spatial, strides=[stride] * spatial,
                  pads=[pad] * (2 * spatial), dilations=[dilation] * spatial, group=groups)


def batch_norm(g: GraphBuilder, x: str, channels: int, name: str) -> str:
    """Scales near 1, so the signal neither fades nor grows over a hundred layers."""
    params = [g.uniform(f"{name}.gamma", (channels,), 0.8, 1.2), g.weight(f"{name}.beta", (channels,), 0.1),
              g.weight(f"{name}.mean", (channels,), 0.1), g.uniform(f"{name}.var", (channels,), 0.5, 1.5)]
    return g.node("BatchNormalization", [x, *params], name, epsilon=1e-5)


def activation(g: GraphBuilder, x: str, kind: str | None, name: str) -> str:
    """relu, silu (Sigmoid * x, as exported), hardswish, hardsigmoid, or None for none."""
    if kind is None:
        return x
    if kind == "silu":
        return g.node("Mul", [x, g.node("Sigmoid", [x], f"{name}.sigmoid")], name)
    if kind == "hardsigmoid":  # PyTorch's slope, not ONNX's default 0.2
        return g.node("HardSigmoid", [x], name, alpha=1.0 / 6, beta=0.5)
    return g.node({"relu": "Relu", "hardswish": "HardSwish"}[kind], [x], name)


def conv_bn(g: GraphBuilder, x: str, cin: int, cout: int, k: int, name: str, stride: int = 1, groups: int = 1,
            act: str | None = "relu") -> str:
    """conv (no bias) -> batch norm -> activation: the unit of every modern CNN."""
    y = conv(g, x, cin, cout, k, f"{name}.conv", stride, groups, bias=False)
    return activation(g, batch_norm(g, y, cout, f"{name}.bn"), act, f"{name}.{act}")


def classifier(g: GraphBuilder, x: str, cin: int, classes: int, name: str = "logits") -> str:
    """Global average pool -> flatten -> one dense layer."""
    flat = g.node("Flatten", [g.node("GlobalAveragePool", [x], f"{name}.pool")], f"{name}.flatten", axis=1)
    w, b = g.weight(f"{name}.weight", (classes, cin), (1.0 / cin) ** 0.5), g.weight(f"{name}.bias", (classes,), 0.01)
    return g.node("Gemm", [flat, w, b], name, transB=1)


def scalar(g: GraphBuilder, name: str, value: float) -> str:
    return g.const(name, np.array(value, np.float32))


def tensor(name: str, dims: list[int | str], elem_type: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, dims)

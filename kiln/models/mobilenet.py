"""MobileNetV2 with torchvision's architecture and random fixed-seed weights: inverted residuals,
depthwise convolutions (group = channels) and ReLU6 written as Clip, the shapes of a mobile model."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from kiln.models.onnx_builder import GraphBuilder

# expansion t, output channels c, repeats n, first stride s (torchvision's inverted_residual_setting)
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
            (6, 320, 1, 1))


def divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of 8, never more than 10% down."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv_bn(g: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int, name: str,
             groups: int = 1, relu6: bool = True) -> str:
    w = g.weight(f"{name}.weight", (cout, cin // groups, k, k))
    y = g.node("Conv", [x, w], f"{name}.conv", kernel_shape=[k, k], strides=[stride, stride],
               pads=[k // 2] * 4, group=groups)
    y = g.batch_norm(y, cout, f"{name}.bn")
    return g.node("Clip", [y, "relu6.min", "relu6.max"], f"{name}.relu6") if relu6 else y


def _inverted_residual(g: GraphBuilder, x: str, cin: int, cout: int, stride: int, t: int, name: str) -> str:
    hidden = cin * t
    y = _conv_bn(g, x, cin, hidden, 1, 1, f"{name}.expand") if t != 1 else x
    y = _conv_bn(g, y, hidden, hidden, 3, stride, f"{name}.dw", groups=hidden)
    y = _conv_bn(g, y, hidden, cout, 1, 1, f"{name}.project", relu6=False)
    return g.node("Add", [x, y], f"{name}.add") if stride == 1 and cin == cout else y


def mobilenet_v2(seed: int = 0, batch: int | str = "N", size: int = 224, classes: int = 1000,
                 width: float = 1.0) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    g.const("relu6.min", np.array(0.0, np.float32))
    g.const("relu6.max", np.array(6.0, np.float32))
    c = divisible(32 * width)
    x = _conv_bn(g, "image", 3, c, 3, 2, "stem")
    for i, (t, ch, n, s) in enumerate(SETTINGS):
        cout = divisible(ch * width)
        for j in range(n):
            x = _inverted_residual(g, x, c, cout, s if j == 0 else 1, t, f"block{i}.{j}")
            c = cout
    last = divisible(1280 * max(1.0, width))
    x = _conv_bn(g, x, c, last, 1, 1, "head")
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = g.node("Flatten", [x], "flatten", axis=1)
    w = g.weight("fc.weight", (classes, last), (1.0 / last) ** 0.5)
    b = g.weight("fc.bias", (classes,), 0.01)
    g.node("Gemm", [x, w, b], "logits", transB=1)
    return g.model("kiln_mobilenet_v2",
                   [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])])

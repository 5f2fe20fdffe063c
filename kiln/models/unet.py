"""A UNet-style segmentation network: double 3x3 conv-BN-ReLU per level, max-pool down, up by
transposed convolution (2x2, stride 2) or bilinear Resize + 1x1 conv, the skip concatenated on
channels, and a 1x1 per-pixel classifier at full resolution."""

from __future__ import annotations

import numpy as np
import onnx

from kiln.models.layers import conv, conv_bn, tensor
from kiln.models.onnx_builder import GraphBuilder


def _double(g: GraphBuilder, x: str, cin: int, cout: int, name: str) -> str:
    return conv_bn(g, conv_bn(g, x, cin, cout, 3, f"{name}.1"), cout, cout, 3, f"{name}.2")


def _up(g: GraphBuilder, x: str, cin: int, cout: int, transposed: bool, name: str) -> str:
    if transposed:
        w = g.weight(f"{name}.weight", (cin, cout, 2, 2))
        return g.node("ConvTranspose", [x, w, g.weight(f"{name}.bias", (cout,), 0.01)], name, kernel_shape=[2, 2],
                      strides=[2, 2])
    scales = g.const(f"{name}.scales", np.array([1, 1, 2, 2], np.float32))
    y = g.node("Resize", [x, "", scales], f"{name}.resize", mode="linear")
    return conv(g, y, cin, cout, 1, name)


def unet(seed: int = 0, batch: int | str = 1, size: int = 128, base: int = 16, depth: int = 4, classes: int = 8,
         transposed: bool = True) -> onnx.ModelProto:
    """image [batch, 3, size, size] (size a multiple of 2**depth) -> per-pixel logits [batch, classes, size, size]."""
    g = GraphBuilder(seed)
    x, c, skips = "image", 3, []
    for i in range(depth):
        x = _double(g, x, c, base * 2 ** i, f"down{i}")
        c = base * 2 ** i
        skips.append(x)
        x = g.node("MaxPool", [x], f"down{i}.pool", kernel_shape=[2, 2], strides=[2, 2])
    x = _double(g, x, c, 2 * c, "bottom")
    c *= 2
    for i in reversed(range(depth)):
        x = _up(g, x, c, c // 2, transposed, f"up{i}")
        x = _double(g, g.node("Concat", [x, skips[i]], f"up{i}.cat", axis=1), c, c // 2, f"up{i}")
        c //= 2
    conv(g, x, c, classes, 1, "logits")
    return g.model("kiln_unet", [tensor("image", [batch, 3, size, size])],
                   [tensor("logits", [batch, classes, size, size])])

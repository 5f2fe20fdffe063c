"""GoogLeNet (Inception v1) with torchvision's layer table: multi-branch blocks (1x1; 1x1 -> 3x3;
1x1 -> 3x3; 3x3 max pool -> 1x1) concatenated on channels, between strided max pools."""

from __future__ import annotations

import onnx

from kiln.models.layers import classifier, conv_bn, tensor
from kiln.models.onnx_builder import GraphBuilder

# 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5" (3x3 in torchvision), pool projection; "M" = max pool
BLOCKS = ((64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), "M",
          (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
          (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128), "M",
          (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128))


def _pool(g: GraphBuilder, x: str, name: str, stride: int = 2) -> str:
    return g.node("MaxPool", [x], name, kernel_shape=[3, 3], strides=[stride, stride], pads=[1, 1, 1, 1])


def _inception(g: GraphBuilder, x: str, cin: int, spec: tuple[int, ...], width: float, name: str) -> tuple[str, int]:
    c1, r3, c3, r5, c5, proj = (max(4, int(v * width)) for v in spec)
    one = conv_bn(g, x, cin, c1, 1, f"{name}.b1")
    three = conv_bn(g, conv_bn(g, x, cin, r3, 1, f"{name}.b2.reduce"), r3, c3, 3, f"{name}.b2")
    five = conv_bn(g, conv_bn(g, x, cin, r5, 1, f"{name}.b3.reduce"), r5, c5, 3, f"{name}.b3")
    pool = conv_bn(g, _pool(g, x, f"{name}.b4.pool", 1), cin, proj, 1, f"{name}.b4")
    return g.node("Concat", [one, three, five, pool], name, axis=1), c1 + c3 + c5 + proj


def googlenet(seed: int = 0, batch: int | str = 1, size: int = 224, width: float = 1.0,
              classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] -> logits; `width` scales every conv's channels."""
    g = GraphBuilder(seed)
    c0, c1, c2 = (max(8, int(v * width)) for v in (64, 64, 192))
    x = _pool(g, conv_bn(g, "image", 3, c0, 7, "conv1", 2), "pool1")
    x = _pool(g, conv_bn(g, conv_bn(g, x, c0, c1, 1, "conv2"), c1, c2, 3, "conv3"), "pool2")
    c = c2
    for i, spec in enumerate(BLOCKS):
        if spec == "M":
            x = _pool(g, x, f"pool.{i}")
        else:
            x, c = _inception(g, x, c, spec, width, f"inception{i}")
    classifier(g, x, c, classes)
    return g.model("kiln_googlenet", [tensor("image", [batch, 3, size, size])], [tensor("logits", [batch, classes])])

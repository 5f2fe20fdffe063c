"""ShuffleNetV2 (x1.0) with torchvision's architecture: channel split, a depthwise branch, concatenation
and the channel shuffle (Reshape -> Transpose -> Reshape): data movement as much as arithmetic."""

from __future__ import annotations

import numpy as np
import onnx

from kiln.models.layers import classifier, conv_bn, tensor
from kiln.models.onnx_builder import GraphBuilder

STAGES = (4, 8, 4)  # units per stage


def _shuffle(g: GraphBuilder, x: str, channels: int, size: int, name: str) -> str:
    grouped = g.const(f"{name}.grouped_shape", np.array([0, 2, channels // 2, size, size], np.int64))
    flat = g.const(f"{name}.flat_shape", np.array([0, channels, size, size], np.int64))
    y = g.node("Transpose", [g.node("Reshape", [x, grouped], f"{name}.grouped")], f"{name}.t", perm=[0, 2, 1, 3, 4])
    return g.node("Reshape", [y, flat], name)


def _branch(g: GraphBuilder, x: str, cin: int, cout: int, stride: int, name: str) -> str:
    y = conv_bn(g, x, cin, cout, 1, f"{name}.1")
    y = conv_bn(g, y, cout, cout, 3, f"{name}.dw", stride, groups=cout, act=None)
    return conv_bn(g, y, cout, cout, 1, f"{name}.2")


def _unit(g: GraphBuilder, x: str, cin: int, cout: int, stride: int, size: int, name: str) -> str:
    half = cout // 2
    if stride == 1:
        g.nodes.append(onnx.helper.make_node("Split", [x, g.const(f"{name}.halves", np.array([half, half], np.int64))],
                                             [f"{name}.keep", f"{name}.in"], name=f"{name}.split", axis=1))
        left, right = f"{name}.keep", _branch(g, f"{name}.in", half, half, 1, f"{name}.b2")
    else:
        left = conv_bn(g, conv_bn(g, x, cin, cin, 3, f"{name}.b1.dw", 2, groups=cin, act=None), cin, half, 1,
                       f"{name}.b1.1")
        right = _branch(g, x, cin, half, 2, f"{name}.b2")
    return _shuffle(g, g.node("Concat", [left, right], f"{name}.concat", axis=1), cout, size, f"{name}.shuffle")


def shufflenet_v2(seed: int = 0, batch: int | str = 1, size: int = 224, channels: tuple[int, ...] = (116, 232, 464),
                  stem: int = 24, last: int = 1024, classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] (size a multiple of 32) -> logits."""
    g = GraphBuilder(seed)
    x = conv_bn(g, "image", 3, stem, 3, "stem", 2)
    x = g.node("MaxPool", [x], "stem.pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c, s = stem, size // 4
    for i, (n, cout) in enumerate(zip(STAGES, channels)):
        for j in range(n):
            s = s // 2 if j == 0 else s
            x = _unit(g, x, c, cout, 2 if j == 0 else 1, s, f"stage{i}.{j}")
            c = cout
    classifier(g, conv_bn(g, x, c, last, 1, "head"), last, classes)
    return g.model("kiln_shufflenet_v2", [tensor("image", [batch, 3, size, size])],
                   [tensor("logits", [batch, classes])])

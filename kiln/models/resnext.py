"""A ResNeXt-50-style network (32 groups of 4 channels at the first stage): bottlenecks whose 3x3
convolution is grouped, the family of grouped convolutions that neither depthwise nor dense kernels cover."""

from __future__ import annotations

import onnx

from kiln.models.layers import classifier, conv_bn, tensor
from kiln.models.onnx_builder import GraphBuilder


def _block(g: GraphBuilder, x: str, cin: int, planes: int, groups: int, group_width: int, stride: int,
           name: str) -> tuple[str, int]:
    inner, cout = groups * group_width * planes // 64, planes * 4
    y = conv_bn(g, x, cin, inner, 1, f"{name}.1")
    y = conv_bn(g, y, inner, inner, 3, f"{name}.2", stride, groups=groups)
    y = conv_bn(g, y, inner, cout, 1, f"{name}.3", act=None)
    short = x if stride == 1 and cin == cout else conv_bn(g, x, cin, cout, 1, f"{name}.down", stride, act=None)
    return g.node("Relu", [g.node("Add", [y, short], f"{name}.add")], f"{name}.out"), cout


def resnext(seed: int = 0, batch: int | str = 1, size: int = 160, layers: tuple[int, ...] = (3, 4, 6, 3),
            groups: int = 32, group_width: int = 4, base: int = 64, classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] -> logits; stage i has base * 2**i planes."""
    g = GraphBuilder(seed)
    x = conv_bn(g, "image", 3, base, 7, "stem", 2)
    x = g.node("MaxPool", [x], "stem.pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = base
    for i, n in enumerate(layers):
        for j in range(n):
            x, c = _block(g, x, c, base * 2 ** i, groups, group_width, 2 if i and not j else 1, f"layer{i}.{j}")
    classifier(g, x, c, classes)
    return g.model("kiln_resnext", [tensor("image", [batch, 3, size, size])], [tensor("logits", [batch, classes])])

"""A DenseNet-121-style network: every layer's output concatenated to all before it (BN -> ReLU ->
1x1 -> BN -> ReLU -> 3x3, growth k), average-pool transitions: concatenation-heavy, with pre-activation
normalization that cannot fold into the convolution before it."""

from __future__ import annotations

import onnx

from kiln.models.layers import batch_norm, classifier, conv, conv_bn, tensor
from kiln.models.onnx_builder import GraphBuilder


def _norm_relu_conv(g: GraphBuilder, x: str, cin: int, cout: int, k: int, name: str) -> str:
    y = g.node("Relu", [batch_norm(g, x, cin, f"{name}.bn")], f"{name}.relu")
    return conv(g, y, cin, cout, k, f"{name}.conv", bias=False)


def _dense_block(g: GraphBuilder, x: str, cin: int, layers: int, growth: int, name: str) -> tuple[str, int]:
    features, c = [x], cin
    for i in range(layers):
        inp = features[0] if len(features) == 1 else g.node("Concat", features, f"{name}.{i}.cat", axis=1)
        y = _norm_relu_conv(g, inp, c, 4 * growth, 1, f"{name}.{i}.1")
        features.append(_norm_relu_conv(g, y, 4 * growth, growth, 3, f"{name}.{i}.2"))
        c += growth
    return g.node("Concat", features, f"{name}.out", axis=1), c


def densenet(seed: int = 0, batch: int | str = 1, size: int = 160, blocks: tuple[int, ...] = (6, 12, 24, 16),
             growth: int = 32, stem: int = 64, classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] -> logits."""
    g = GraphBuilder(seed)
    x = conv_bn(g, "image", 3, stem, 7, "stem", 2)
    x = g.node("MaxPool", [x], "stem.pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = stem
    for i, n in enumerate(blocks):
        x, c = _dense_block(g, x, c, n, growth, f"block{i}")
        if i < len(blocks) - 1:
            x = _norm_relu_conv(g, x, c, c // 2, 1, f"transition{i}")
            x = g.node("AveragePool", [x], f"transition{i}.pool", kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    x = g.node("Relu", [batch_norm(g, x, c, "final.bn")], "final.relu")
    classifier(g, x, c, classes)
    return g.model("kiln_densenet", [tensor("image", [batch, 3, size, size])], [tensor("logits", [batch, classes])])

"""MobileNetV3-Large with torchvision's architecture and random fixed-seed weights: inverted residuals
with squeeze-and-excitation gated by HardSigmoid, HardSwish activations, 3x3 and 5x5 depthwise
convolutions: the mobile classifier whose epilogues are not ReLU."""

from __future__ import annotations

import onnx

from kiln.models.layers import activation, classifier, conv, conv_bn, tensor
from kiln.models.mobilenet import divisible
from kiln.models.onnx_builder import GraphBuilder

# kernel, expanded channels, output channels, squeeze-excite, activation, stride (torchvision's large config)
LARGE = ((3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
         (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
         (3, 240, 80, False, "hardswish", 2), (3, 200, 80, False, "hardswish", 1),
         (3, 184, 80, False, "hardswish", 1), (3, 184, 80, False, "hardswish", 1),
         (3, 480, 112, True, "hardswish", 1), (3, 672, 112, True, "hardswish", 1),
         (5, 672, 160, True, "hardswish", 2), (5, 960, 160, True, "hardswish", 1),
         (5, 960, 160, True, "hardswish", 1))


def _squeeze_excite(g: GraphBuilder, x: str, channels: int, name: str) -> str:
    squeeze = divisible(channels // 4)
    s = g.node("GlobalAveragePool", [x], f"{name}.pool")
    s = g.node("Relu", [conv(g, s, channels, squeeze, 1, f"{name}.fc1")], f"{name}.relu")
    s = activation(g, conv(g, s, squeeze, channels, 1, f"{name}.fc2"), "hardsigmoid", f"{name}.gate")
    return g.node("Mul", [x, s], name)


def _block(g: GraphBuilder, x: str, cin: int, spec: tuple, width: float, name: str) -> tuple[str, int]:
    k, expanded, cout, se, act, stride = spec
    hidden, cout = divisible(expanded * width), divisible(cout * width)
    y = conv_bn(g, x, cin, hidden, 1, f"{name}.expand", act=act) if hidden != cin else x
    y = conv_bn(g, y, hidden, hidden, k, f"{name}.dw", stride, groups=hidden, act=act)
    y = _squeeze_excite(g, y, hidden, f"{name}.se") if se else y
    y = conv_bn(g, y, hidden, cout, 1, f"{name}.project", act=None)
    return (g.node("Add", [x, y], f"{name}.add") if stride == 1 and cin == cout else y), cout


def mobilenet_v3(seed: int = 0, batch: int | str = 1, size: int = 224, width: float = 1.0,
                 classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] -> logits."""
    g = GraphBuilder(seed)
    c = divisible(16 * width)
    x = conv_bn(g, "image", 3, c, 3, "stem", 2, act="hardswish")
    for i, spec in enumerate(LARGE):
        x, c = _block(g, x, c, spec, width, f"block{i}")
    last = divisible(960 * width)
    x = conv_bn(g, x, c, last, 1, "head", act="hardswish")
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = activation(g, conv(g, x, last, 1280, 1, "pre_logits"), "hardswish", "pre_logits.act")
    classifier(g, x, 1280, classes)
    return g.model("kiln_mobilenet_v3", [tensor("image", [batch, 3, size, size])],
                   [tensor("logits", [batch, classes])])

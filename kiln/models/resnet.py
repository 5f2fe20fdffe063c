"""ResNet-18 and ResNet-50 with torchvision's architecture (v1.5: a bottleneck strides in its 3x3
conv), random fixed-seed weights: the workhorse image classifiers, built without downloads."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from kiln.models.onnx_builder import GraphBuilder

BASIC, BOTTLENECK = "basic", "bottleneck"


def _conv_bn(g: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int, name: str,
             relu: bool = True) -> str:
    w = g.weight(f"{name}.weight", (cout, cin, k, k))
    y = g.node("Conv", [x, w], f"{name}.conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    y = g.batch_norm(y, cout, f"{name}.bn")
    return g.node("Relu", [y], f"{name}.relu") if relu else y


def _block(g: GraphBuilder, kind: str, x: str, cin: int, planes: int, stride: int, name: str) -> tuple[str, int]:
    """One residual block; returns its output and channel count."""
    if kind == BASIC:
        cout = planes
        y = _conv_bn(g, x, cin, planes, 3, stride, f"{name}.1")
        y = _conv_bn(g, y, planes, planes, 3, 1, f"{name}.2", relu=False)
    else:
        cout = planes * 4
        y = _conv_bn(g, x, cin, planes, 1, 1, f"{name}.1")
        y = _conv_bn(g, y, planes, planes, 3, stride, f"{name}.2")
        y = _conv_bn(g, y, planes, cout, 1, 1, f"{name}.3", relu=False)
    short = x if stride == 1 and cin == cout else _conv_bn(g, x, cin, cout, 1, stride, f"{name}.down", relu=False)
    out = g.node("Add", [y, short], f"{name}.add")
    return g.node("Relu", [out], f"{name}.out"), cout


def _resnet(kind: str, layers: tuple[int, ...], name: str, seed: int, batch: int | str, size: int,
            classes: int) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x = _conv_bn(g, "image", 3, 64, 7, 2, "stem")
    x = g.node("MaxPool", [x], "stem.pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = 64
    for i, (n, planes) in enumerate(zip(layers, (64, 128, 256, 512))):
        for j in range(n):
            x, c = _block(g, kind, x, c, planes, 2 if i > 0 and j == 0 else 1, f"layer{i + 1}.{j}")
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = g.node("Flatten", [x], "flatten", axis=1)
    w = g.weight("fc.weight", (classes, c), (1.0 / c) ** 0.5)
    b = g.weight("fc.bias", (classes,), 0.01)
    g.node("Gemm", [x, w, b], "logits", transB=1)
    return g.model(name, [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])])


def resnet18(seed: int = 0, batch: int | str = "N", size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    return _resnet(BASIC, (2, 2, 2, 2), "kiln_resnet18", seed, batch, size, classes)


def resnet50(seed: int = 0, batch: int | str = "N", size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    return _resnet(BOTTLENECK, (3, 4, 6, 3), "kiln_resnet50", seed, batch, size, classes)

"""EfficientNet-B0 with torchvision's architecture and random fixed-seed weights, written as a PyTorch
export writes it: SiLU as Sigmoid + Mul, squeeze-and-excitation blocks (global pooling, two 1x1 convs,
a sigmoid gate multiplied over the feature map), 3x3 and 5x5 depthwise convolutions. It exercises
what the ResNets and MobileNetV2 do not: transcendental epilogues and broadcast gates."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from kiln.models.onnx_builder import GraphBuilder

# expansion, kernel, first stride, output channels, repeats (torchvision's efficientnet_b0 stages)
STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
          (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def _silu(g: GraphBuilder, x: str, name: str) -> str:
    return g.node("Mul", [x, g.node("Sigmoid", [x], f"{name}.sigmoid")], name)


def _batch_norm(g: GraphBuilder, x: str, channels: int, name: str) -> str:
    """Scales near 1 (GraphBuilder.batch_norm's near 0 would fade the signal over 80 layers)."""
    params = [g.uniform(f"{name}.gamma", (channels,), 0.8, 1.2), g.weight(f"{name}.beta", (channels,), 0.1),
              g.weight(f"{name}.mean", (channels,), 0.1), g.uniform(f"{name}.var", (channels,), 0.5, 1.5)]
    return g.node("BatchNormalization", [x, *params], name, epsilon=1e-5)


def _conv_bn(g: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int, name: str, groups: int = 1,
             act: bool = True) -> str:
    w = g.weight(f"{name}.weight", (cout, cin // groups, k, k))
    y = g.node("Conv", [x, w], f"{name}.conv", kernel_shape=[k, k], strides=[stride, stride],
               pads=[k // 2] * 4, group=groups)
    y = _batch_norm(g, y, cout, f"{name}.bn")
    return _silu(g, y, f"{name}.silu") if act else y


def _squeeze_excite(g: GraphBuilder, x: str, channels: int, squeeze: int, name: str) -> str:
    s = g.node("GlobalAveragePool", [x], f"{name}.pool")
    s = g.node("Conv", [s, g.weight(f"{name}.fc1.weight", (squeeze, channels, 1, 1)),
                        g.weight(f"{name}.fc1.bias", (squeeze,), 0.1)], f"{name}.fc1", kernel_shape=[1, 1])
    s = _silu(g, s, f"{name}.silu")
    s = g.node("Conv", [s, g.weight(f"{name}.fc2.weight", (channels, squeeze, 1, 1)),
                        g.weight(f"{name}.fc2.bias", (channels,), 0.1)], f"{name}.fc2", kernel_shape=[1, 1])
    return g.node("Mul", [x, g.node("Sigmoid", [s], f"{name}.gate")], name)


def _mbconv(g: GraphBuilder, x: str, cin: int, cout: int, expand: int, k: int, stride: int, name: str) -> str:
    hidden = cin * expand
    y = _conv_bn(g, x, cin, hidden, 1, 1, f"{name}.expand") if expand != 1 else x
    y = _conv_bn(g, y, hidden, hidden, k, stride, f"{name}.dw", groups=hidden)
    y = _squeeze_excite(g, y, hidden, max(1, cin // 4), f"{name}.se")
    y = _conv_bn(g, y, hidden, cout, 1, 1, f"{name}.project", act=False)
    return g.node("Add", [x, y], f"{name}.add") if stride == 1 and cin == cout else y


def efficientnet_b0(seed: int = 0, batch: int | str = "N", size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] -> logits [batch, classes]."""
    g = GraphBuilder(seed)
    c = 32
    x = _conv_bn(g, "image", 3, c, 3, 2, "stem")
    for i, (expand, k, stride, cout, repeats) in enumerate(STAGES):
        for j in range(repeats):
            x = _mbconv(g, x, c, cout, expand, k, stride if j == 0 else 1, f"stage{i}.{j}")
            c = cout
    x = _conv_bn(g, x, c, 1280, 1, 1, "head")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    w = g.weight("fc.weight", (classes, 1280), (1.0 / 1280) ** 0.5)
    g.node("Gemm", [x, w, g.weight("fc.bias", (classes,), 0.01)], "logits", transB=1)
    return g.model("kiln_efficientnet_b0",
                   [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])])

"""A VGG-11-style plain CNN (conv + bias + ReLU stacks, max pools, a two-layer classifier): no
branches, no normalization, the work all in dense 3x3 convolutions."""

from __future__ import annotations

import onnx

from kiln.models.layers import conv, tensor
from kiln.models.onnx_builder import GraphBuilder

CONFIG = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")  # torchvision's vgg11 "A"


def vgg(seed: int = 0, batch: int | str = 1, size: int = 112, width: float = 1.0, hidden: int = 4096,
        classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] -> logits; `width` scales every conv's channels."""
    g = GraphBuilder(seed)
    x, c = "image", 3
    for i, v in enumerate(CONFIG):
        if v == "M":
            x = g.node("MaxPool", [x], f"features.{i}.pool", kernel_shape=[2, 2], strides=[2, 2])
            continue
        cout = max(8, int(v * width))
        x = g.node("Relu", [conv(g, x, c, cout, 3, f"features.{i}")], f"features.{i}.relu")
        c = cout
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    for i, (cin, cout) in enumerate(((c, hidden), (hidden, hidden))):
        w, b = g.weight(f"fc{i}.weight", (cout, cin)), g.weight(f"fc{i}.bias", (cout,), 0.01)
        x = g.node("Relu", [g.node("Gemm", [x, w, b], f"fc{i}", transB=1)], f"fc{i}.relu")
    w, b = g.weight("logits.weight", (classes, hidden), (1.0 / hidden) ** 0.5), g.weight("logits.bias", (classes,))
    g.node("Gemm", [x, w, b], "logits", transB=1)
    return g.model("kiln_vgg", [tensor("image", [batch, 3, size, size])], [tensor("logits", [batch, classes])])

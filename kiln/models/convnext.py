"""A ConvNeXt-style network (torchvision's ConvNeXt-T block, fewer blocks by default): 7x7 depthwise
convolutions, LayerNorm over channels in channels-last layout (Transpose -> LayerNormalization ->
MatMul MLP with GELU -> layer scale -> Transpose back), patchify stem and 2x2 strided downsampling."""

from __future__ import annotations

import onnx

from kiln.models.bert import gelu, layer_norm, linear
from kiln.models.layers import conv, tensor
from kiln.models.onnx_builder import GraphBuilder

NCHW_TO_NHWC, NHWC_TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _channel_norm(g: GraphBuilder, x: str, channels: int, name: str) -> str:
    """LayerNorm over the channels of an NCHW tensor, as torchvision's LayerNorm2d exports it."""
    y = g.node("Transpose", [x], f"{name}.nhwc", perm=NCHW_TO_NHWC)
    return g.node("Transpose", [layer_norm(g, y, channels, f"{name}.ln")], name, perm=NHWC_TO_NCHW)


def _block(g: GraphBuilder, x: str, dim: int, name: str) -> str:
    y = conv(g, x, dim, dim, 7, f"{name}.dw", groups=dim)
    y = layer_norm(g, g.node("Transpose", [y], f"{name}.nhwc", perm=NCHW_TO_NHWC), dim, f"{name}.ln")
    y = linear(g, gelu(g, linear(g, y, dim, 4 * dim, f"{name}.fc1"), f"{name}.gelu"), 4 * dim, dim, f"{name}.fc2")
    y = g.node("Mul", [y, g.uniform(f"{name}.layer_scale", (dim,), 0.1, 0.3)], f"{name}.scaled")
    return g.node("Add", [x, g.node("Transpose", [y], f"{name}.nchw", perm=NHWC_TO_NCHW)], name)


def convnext(seed: int = 0, batch: int | str = 1, size: int = 128, depths: tuple[int, ...] = (3, 3, 9, 3),
             dims: tuple[int, ...] = (96, 192, 384, 768), classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] (size a multiple of 32) -> logits."""
    g = GraphBuilder(seed)
    x = _channel_norm(g, conv(g, "image", 3, dims[0], 4, "stem", 4, pad=0), dims[0], "stem.norm")
    for i, (depth, dim) in enumerate(zip(depths, dims)):
        if i:
            x = conv(g, _channel_norm(g, x, dims[i - 1], f"down{i}.norm"), dims[i - 1], dim, 2, f"down{i}", 2)
        for j in range(depth):
            x = _block(g, x, dim, f"stage{i}.{j}")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    x = layer_norm(g, x, dims[-1], "head.norm")
    w = g.weight("logits.weight", (dims[-1], classes), (1.0 / dims[-1]) ** 0.5)
    g.node("Add", [g.node("MatMul", [x, w], "logits.matmul"), g.weight("logits.bias", (classes,), 0.01)], "logits")
    return g.model("kiln_convnext", [tensor("image", [batch, 3, size, size])], [tensor("logits", [batch, classes])])


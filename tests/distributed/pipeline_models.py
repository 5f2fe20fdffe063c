"""Small models the pipeline tests cut: a residual CNN (a skip connection crosses a cut beside the main path)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from kiln.models.onnx_builder import GraphBuilder


def residual_cnn(seed: int = 0, size: int = 8, width: int = 8, blocks: int = 2, classes: int = 5) -> onnx.ModelProto:
    """conv stem, `blocks` residual blocks of two 3x3 convs with batch norm, global pooling, a classifier."""
    g = GraphBuilder(seed)
    x = _conv(g, "image", 3, width, "stem")
    for i in range(blocks):
        y = _conv(g, x, width, width, f"block{i}.1")
        y = _conv(g, y, width, width, f"block{i}.2", relu=False)
        x = g.node("Relu", [g.node("Add", [y, x], f"block{i}.add")], f"block{i}.out")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "pool")], "flatten", axis=1)
    g.node("Gemm", [x, g.weight("fc.weight", (classes, width)), g.weight("fc.bias", (classes,), 0.01)], "logits",
           transB=1)
    return g.model("residual_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])])


def _conv(g: GraphBuilder, x: str, cin: int, cout: int, name: str, relu: bool = True) -> str:
    w = g.weight(f"{name}.weight", (cout, cin, 3, 3))
    y = g.batch_norm(g.node("Conv", [x, w], f"{name}.conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]), cout, f"{name}.bn")
    return g.node("Relu", [y], f"{name}.relu") if relu else y

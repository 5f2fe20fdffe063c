"""A Vision Transformer (ViT-Ti/16 by default): a 16x16 patchify convolution, a class token and
learned positions, pre-norm encoder layers (BERT's attention and GELU MLP), the class token's
features into a linear head."""

from __future__ import annotations

import numpy as np
import onnx

from kiln.models.bert import attention, gelu, layer_norm, linear
from kiln.models.layers import conv, tensor
from kiln.models.onnx_builder import GraphBuilder


def _layer(g: GraphBuilder, x: str, hidden: int, heads: int, name: str) -> str:
    a = attention(g, layer_norm(g, x, hidden, f"{name}.norm1"), hidden, heads, f"{name}.attention")
    x = g.node("Add", [x, a], f"{name}.attention.residual")
    h = gelu(g, linear(g, layer_norm(g, x, hidden, f"{name}.norm2"), hidden, 4 * hidden, f"{name}.mlp.up"),
             f"{name}.mlp.gelu")
    return g.node("Add", [x, linear(g, h, 4 * hidden, hidden, f"{name}.mlp.down")], f"{name}.mlp.residual")


def vit(seed: int = 0, batch: int = 1, size: int = 224, patch: int = 16, hidden: int = 192, layers: int = 12,
        heads: int = 3, classes: int = 1000) -> onnx.ModelProto:
    """image [batch, 3, size, size] -> logits [batch, classes]."""
    g = GraphBuilder(seed)
    tokens = (size // patch) ** 2
    x = conv(g, "image", 3, hidden, patch, "patch", patch, pad=0)
    x = g.node("Reshape", [x, g.const("patch.flat_shape", np.array([0, hidden, tokens], np.int64))], "patch.flat")
    x = g.node("Transpose", [x], "patch.tokens", perm=[0, 2, 1])
    cls = g.node("Expand", [g.weight("cls_token", (1, 1, hidden), 0.02),
                            g.const("cls.shape", np.array([batch, 1, hidden], np.int64))], "cls.batch")
    x = g.node("Concat", [cls, x], "tokens", axis=1)
    x = g.node("Add", [x, g.weight("positions", (1, tokens + 1, hidden), 0.02)], "tokens.positioned")
    for i in range(layers):
        x = _layer(g, x, hidden, heads, f"layer{i}")
    x = layer_norm(g, x, hidden, "norm")
    x = g.node("Gather", [x, g.const("cls.index", np.array(0, np.int64))], "cls.features", axis=1)
    linear(g, x, hidden, classes, "logits")
    return g.model("kiln_vit", [tensor("image", [batch, 3, size, size])], [tensor("logits", [batch, classes])])

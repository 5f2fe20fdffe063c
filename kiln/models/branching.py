"""Models with parallel branches, for the dataflow executor (kiln.runtime.dataflow_executor): an
inception-style network, a trunk with several heads, and an ensemble of two CNNs run as one graph.
Built from code with fixed-seed weights; small enough that batch 1 is many short kernels, where
splitting the cores between branches pays better than splitting each kernel."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from kiln.models.onnx_builder import GraphBuilder


def _conv(g: GraphBuilder, x: str, cin: int, cout: int, k: int, name: str, relu: bool = True) -> str:
    w = g.weight(f"{name}.weight", (cout, cin, k, k))
    b = g.weight(f"{name}.bias", (cout,), 0.01)
    y = g.node("Conv", [x, w, b], name, kernel_shape=[k, k], pads=[k // 2] * 4)
    return g.node("Relu", [y], f"{name}.relu") if relu else y


def _head(g: GraphBuilder, x: str, cin: int, classes: int, name: str) -> str:
    pooled = g.node("GlobalAveragePool", [x], f"{name}.pool")
    flat = g.node("Flatten", [pooled], f"{name}.flatten")
    w, b = g.weight(f"{name}.weight", (classes, cin)), g.weight(f"{name}.bias", (classes,), 0.01)
    return g.node("Gemm", [flat, w, b], name, transB=1)


def _image(batch: int | str, channels: int, size: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, channels, size, size])


def _scores(name: str, batch: int | str, classes: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, classes])


def inception_net(seed: int = 0, batch: int | str = 1, size: int = 16, blocks: int = 2, width: int = 16,
                  classes: int = 10) -> onnx.ModelProto:
    """A stem conv, then `blocks` inception blocks: four branches (1x1; 1x1 then 3x3; 1x1 then two 3x3;
    3x3 max pool then 1x1), each `width` channels, concatenated."""
    g = GraphBuilder(seed)
    x = _conv(g, "input", 3, 2 * width, 3, "stem")
    cin = 2 * width
    for b in range(blocks):
        n = f"block{b}"
        one = _conv(g, x, cin, width, 1, f"{n}.b1")
        three = _conv(g, _conv(g, x, cin, width, 1, f"{n}.b3.reduce"), width, width, 3, f"{n}.b3")
        five = _conv(g, _conv(g, _conv(g, x, cin, width, 1, f"{n}.b5.reduce"), width, width, 3, f"{n}.b5a"),
                     width, width, 3, f"{n}.b5b")
        pool = g.node("MaxPool", [x], f"{n}.pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
        proj = _conv(g, pool, cin, width, 1, f"{n}.pool.proj")
        x = g.node("Concat", [one, three, five, proj], f"{n}.concat", axis=1)
        cin = 4 * width
    out = _head(g, x, cin, classes, "fc")
    return g.model("kiln_inception", [_image(batch, 3, size)], [_scores(out, batch, classes)])


def multi_head(seed: int = 0, batch: int | str = 1, features: int = 256, hidden: int = 256, heads: int = 3,
               depth: int = 3, classes: int = 10) -> onnx.ModelProto:
    """A shared dense trunk, then `heads` independent stacks of `depth` dense layers, one output each."""
    g = GraphBuilder(seed)

    def dense(x: str, cin: int, cout: int, name: str, relu: bool = True) -> str:
        w, b = g.weight(f"{name}.weight", (cout, cin)), g.weight(f"{name}.bias", (cout,), 0.01)
        y = g.node("Gemm", [x, w, b], name, transB=1)
        return g.node("Relu", [y], f"{name}.relu") if relu else y

    trunk = dense("input", features, hidden, "trunk")
    outs = []
    for h in range(heads):
        y = trunk
        for d in range(depth):
            y = dense(y, hidden, hidden, f"head{h}.fc{d}")
        outs.append(dense(y, hidden, classes, f"head{h}.out", relu=False))
    return g.model("kiln_multi_head", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, features])],
                   [_scores(o, batch, classes) for o in outs])


def ensemble(seed: int = 0, batch: int | str = 1, size: int = 8, width: int = 16, depth: int = 6,
             classes: int = 10) -> onnx.ModelProto:
    """Two CNNs of the same shape (different weights) on one image, their scores averaged: two
    balanced branches from the input to the last node."""
    g = GraphBuilder(seed)
    scores = []
    for m in range(2):
        x, cin = "input", 3
        for d in range(depth):
            x = _conv(g, x, cin, width, 3, f"model{m}.conv{d}")
            cin = width
        scores.append(_head(g, x, cin, classes, f"model{m}.fc"))
    total = g.node("Add", scores, "sum")
    out = g.node("Mul", [total, g.const("half", np.float32(0.5))], "mean")
    return g.model("kiln_ensemble", [_image(batch, 3, size)], [_scores(out, batch, classes)])

"""A 784-1024-1024-10 multilayer perceptron (MNIST-sized) with random fixed-seed weights: three
GEMMs, the simplest model whose time is all matrix multiplication."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from kiln.models.onnx_builder import GraphBuilder


def mlp(seed: int = 0, batch: int | str = "N", sizes: tuple[int, ...] = (784, 1024, 1024, 10)) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x = "input"
    for i, (cin, cout) in enumerate(zip(sizes, sizes[1:])):
        w = g.weight(f"fc{i}.weight", (cout, cin))
        b = g.weight(f"fc{i}.bias", (cout,), 0.01)
        x = g.node("Gemm", [x, w, b], f"fc{i}", transB=1)
        if i < len(sizes) - 2:
            x = g.node("Relu", [x], f"fc{i}.relu")
    return g.model("kiln_mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, sizes[0]])],
                   [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, sizes[-1]])])

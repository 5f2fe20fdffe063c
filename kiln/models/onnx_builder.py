"""A small ONNX graph builder shared by the built-in models: fixed-seed weights, nodes named after
the layer they belong to, and a checked ModelProto at the end."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization is the newest op the models use
IR_VERSION = 8


class GraphBuilder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.inits: list[TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        """Gaussian weights, He-scaled by fan-in unless `scale` is given: activations stay O(1) in depth."""
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else np.sqrt(2.0 / max(fan_in, 1))
        return self.const(name, (self.rng.standard_normal(shape) * s).astype(np.float32))

    def uniform(self, name: str, shape: tuple[int, ...], low: float, high: float) -> str:
        return self.const(name, self.rng.uniform(low, high, shape).astype(np.float32))

    def node(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        """Add a one-output node; its output is called `name`."""
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def batch_norm(self, x: str, channels: int, name: str) -> str:
        """Inference batch norm with non-trivial statistics (variance in [0.5, 1.5))."""
        params = [self.weight(f"{name}.gamma", (channels,), 0.1), self.weight(f"{name}.beta", (channels,), 0.1),
                  self.weight(f"{name}.mean", (channels,), 0.1), self.uniform(f"{name}.var", (channels,), 0.5, 1.5)]
        return self.node("BatchNormalization", [x, *params], name, epsilon=1e-5)

    def model(self, graph_name: str, inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kiln")
        m.ir_version = IR_VERSION
        onnx.checker.check_model(m)
        return m

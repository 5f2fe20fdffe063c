"""Recurrent sequence classifiers with the ONNX LSTM and GRU ops (as torch.onnx exports nn.LSTM and
nn.GRU): stacked layers, the GRU bidirectional with PyTorch's linear_before_reset, the last hidden
state into a linear head. Time steps are sequential: small matrix products, latency-bound."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from kiln.models.layers import tensor
from kiln.models.onnx_builder import GraphBuilder

GATES = {"LSTM": 4, "GRU": 3}


def _recurrent(g: GraphBuilder, op: str, x: str, cin: int, hidden: int, directions: int, name: str) -> tuple[str, str]:
    """One layer; returns (Y [seq, directions, batch, hidden], Y_h [directions, batch, hidden])."""
    s = (1.0 / hidden) ** 0.5
    gates = GATES[op] * hidden
    w = g.uniform(f"{name}.W", (directions, gates, cin), -s, s)
    r = g.uniform(f"{name}.R", (directions, gates, hidden), -s, s)
    b = g.uniform(f"{name}.B", (directions, 2 * gates), -s, s)
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    outs = [f"{name}.Y", f"{name}.Y_h"]
    g.nodes.append(helper.make_node(op, [x, w, r, b], outs, name=name, hidden_size=hidden,
                                    direction="bidirectional" if directions == 2 else "forward", **attrs))
    return outs[0], outs[1]


def _merge_directions(g: GraphBuilder, y: str, hidden: int, directions: int, name: str) -> str:
    """[seq, directions, batch, hidden] -> [seq, batch, directions * hidden], the next layer's input."""
    y = g.node("Transpose", [y], f"{name}.t", perm=[0, 2, 1, 3])
    return g.node("Reshape", [y, g.const(f"{name}.shape", np.array([0, 0, directions * hidden], np.int64))], name)


def _classifier(op: str, seed: int, batch: int | str, seq: int, features: int, hidden: int, layers: int,
                directions: int, classes: int) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x, cin = "sequence", features
    for i in range(layers):
        y, y_h = _recurrent(g, op, x, cin, hidden, directions, f"{op.lower()}{i}")
        x, cin = _merge_directions(g, y, hidden, directions, f"{op.lower()}{i}.out"), directions * hidden
    last = g.node("Transpose", [y_h], "last.t", perm=[1, 0, 2])
    last = g.node("Reshape", [last, g.const("last.shape", np.array([0, -1], np.int64))], "last")
    w, b = g.weight("fc.weight", (classes, directions * hidden)), g.weight("fc.bias", (classes,), 0.01)
    g.node("Gemm", [last, w, b], "logits", transB=1)
    return g.model(f"kiln_{op.lower()}", [tensor("sequence", [seq, batch, features])],
                   [tensor("logits", [batch, classes])])


def lstm(seed: int = 0, batch: int | str = 1, seq: int = 64, features: int = 128, hidden: int = 256,
         layers: int = 2, classes: int = 10) -> onnx.ModelProto:
    """sequence [seq, batch, features] -> logits [batch, classes]: a stacked forward LSTM."""
    return _classifier("LSTM", seed, batch, seq, features, hidden, layers, 1, classes)


def gru(seed: int = 0, batch: int | str = 1, seq: int = 64, features: int = 128, hidden: int = 192,
        layers: int = 2, classes: int = 10) -> onnx.ModelProto:
    """sequence [seq, batch, features] -> logits [batch, classes]: a stacked bidirectional GRU."""
    return _classifier("GRU", seed, batch, seq, features, hidden, layers, 2, classes)

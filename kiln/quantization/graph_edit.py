"""A copy of a model with new nodes: the one way the quantizer's rewrites produce their output."""

from __future__ import annotations

from collections.abc import Iterable

import onnx


def with_nodes(model: onnx.ModelProto, nodes: Iterable[onnx.NodeProto],
               new_initializers: Iterable[onnx.TensorProto]) -> onnx.ModelProto:
    """The model with `nodes` as its graph, keeping only the initializers some node or output still reads."""
    nodes = list(nodes)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input} | {o.name for o in graph.output}
    kept = [t for t in (*graph.initializer, *new_initializers) if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return out

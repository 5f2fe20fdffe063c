"""Fold inference BatchNormalization into the Conv before it, ahead of quantization.

Quantizing first would put a Q/DQ pair on the conv's output and another on the batch norm's, and
quantize the weights before the per-channel scale of the norm multiplies them; folded, the weights
are quantized as they are used and the conv's int8 kernel writes the normalized value directly.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kiln.quantization.graph_edit import with_nodes
from kiln.quantization.names import UniqueNames
from kiln.quantization.plan import float_initializers


def fold_batchnorm(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each foldable Conv -> BatchNormalization pair replaced by one Conv."""
    graph = model.graph
    consts = float_initializers(model)
    uses = Counter(i for n in graph.node for i in n.input if i) + Counter(o.name for o in graph.output)
    producer = {o: n for n in graph.node for o in n.output}
    names = UniqueNames(model)
    folded: dict[int, tuple[onnx.NodeProto, list[onnx.TensorProto]]] = {}
    dropped: set[int] = set()
    for bn in graph.node:
        conv = producer.get(bn.input[0]) if bn.op_type == "BatchNormalization" else None
        if conv is None or not _foldable(conv, bn, consts, uses):
            continue
        folded[id(conv)] = _folded(conv, bn, consts, names)
        dropped.add(id(bn))
    if not folded:
        return model
    nodes = [folded[id(n)][0] if id(n) in folded else n for n in graph.node if id(n) not in dropped]
    return with_nodes(model, nodes, [t for _, inits in folded.values() for t in inits])


def _foldable(conv: onnx.NodeProto, bn: onnx.NodeProto, consts: dict[str, onnx.TensorProto],
              uses: Counter) -> bool:
    """A Conv of constant weights whose output only this inference-mode norm of constant statistics reads."""
    training = any(a.name == "training_mode" and a.i for a in bn.attribute)
    params_constant = all(i in consts for i in bn.input[1:5])
    bias_constant = len(conv.input) < 3 or not conv.input[2] or conv.input[2] in consts
    return (conv.op_type == "Conv" and conv.input[1] in consts and bias_constant and params_constant
            and not training and len([o for o in bn.output if o]) == 1 and uses[conv.output[0]] == 1)


def _folded(conv: onnx.NodeProto, bn: onnx.NodeProto, consts: dict[str, onnx.TensorProto],
            names: UniqueNames) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """The Conv computing the norm's output, and its new weight and bias initializers."""
    gamma, beta, mean, var = (numpy_helper.to_array(consts[i]).astype(np.float64) for i in bn.input[1:5])
    eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    factor = gamma / np.sqrt(var + eps)
    w = numpy_helper.to_array(consts[conv.input[1]]).astype(np.float64)
    has_bias = len(conv.input) > 2 and conv.input[2]
    b = numpy_helper.to_array(consts[conv.input[2]]).astype(np.float64) if has_bias else np.zeros_like(mean)
    w_name, b_name = names.fresh(f"{bn.output[0]}_folded_weight"), names.fresh(f"{bn.output[0]}_folded_bias")
    inits = [numpy_helper.from_array((w * factor.reshape(-1, *[1] * (w.ndim - 1))).astype(np.float32), w_name),
             numpy_helper.from_array(((b - mean) * factor + beta).astype(np.float32), b_name)]
    node = helper.make_node("Conv", [conv.input[0], w_name, b_name], [bn.output[0]], name=conv.name)
    node.attribute.extend(conv.attribute)
    return node, inits

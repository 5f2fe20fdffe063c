"""Dynamic quantization (transformers): MatMul/Gemm weights become int8 ahead of time, activations are
quantized at run time.

Each MatMul or Gemm with a constant 2-D weight becomes the standard-ONNX form ONNX Runtime's
quantize_dynamic emits: DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W_q, x_zero_point) -> Cast to
float -> Mul by x_scale * w_scale (per output column with per-channel weights) [-> Add the bias].
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kiln.quantization.graph_edit import with_nodes
from kiln.quantization.names import UniqueNames
from kiln.quantization.params import quantize_weight, weight_scale
from kiln.quantization.plan import float_initializers


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def dynamic_weight(node: onnx.NodeProto, consts: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    """The node's constant weight as [K, N] (Gemm's transB undone), or None if the node is left float."""
    if node.op_type not in ("MatMul", "Gemm") or node.domain not in ("", "ai.onnx") or node.input[1] not in consts:
        return None
    w = numpy_helper.to_array(consts[node.input[1]])
    if w.ndim != 2:
        return None
    if node.op_type == "Gemm":
        attrs = _attrs(node)
        scaled_bias = attrs.get("beta", 1.0) != 1.0 and len(node.input) > 2 and node.input[2] not in consts
        if attrs.get("transA", 0) or scaled_bias:
            return None
        return w.T if attrs.get("transB", 0) else w
    return w


def quantize_dynamic(model: onnx.ModelProto, floats: set[str], per_channel: bool) -> onnx.ModelProto:
    """The model with every MatMul/Gemm of a constant 2-D weight and a float input made dynamic-int8."""
    consts = float_initializers(model)
    names = UniqueNames(model)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    for node in model.graph.node:
        w = dynamic_weight(node, consts) if node.input[0] in floats else None
        if w is None:
            nodes.append(node)
            continue
        new_nodes, new_inits = _integer_matmul(node, w, consts, names, per_channel)
        nodes.extend(new_nodes)
        inits.extend(new_inits)
    return with_nodes(model, nodes, inits)


def _integer_matmul(node: onnx.NodeProto, w: np.ndarray, consts: dict[str, onnx.TensorProto], names: UniqueNames,
                    per_channel: bool) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The nodes and initializers replacing one MatMul/Gemm (see the module doc)."""
    base = node.name or node.output[0]
    axis = 1 if per_channel else None
    scale = weight_scale(w, axis)
    q = quantize_weight(w, scale, axis)
    attrs = _attrs(node)
    alpha = float(attrs.get("alpha", 1.0)) if node.op_type == "Gemm" else 1.0
    fresh = lambda suffix: names.fresh(f"{base}_{suffix}")
    w_q, w_s = fresh("weight_quantized"), fresh("weight_scale")
    inits = [numpy_helper.from_array(q.values, w_q), numpy_helper.from_array((scale * alpha).astype(np.float32), w_s)]
    x_q, x_s, x_zp, acc, acc_f, s, y = (fresh(part) for part in ("x_quantized", "x_scale", "x_zero_point",
                                                                    "int32", "float", "scale", "output"))
    bias = node.input[2] if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2] else None
    y = node.output[0] if bias is None else y
    nodes = [helper.make_node("DynamicQuantizeLinear", [node.input[0]], [x_q, x_s, x_zp], name=fresh("quantize")),
             helper.make_node("MatMulInteger", [x_q, w_q, x_zp], [acc], name=fresh("matmul_integer")),
             helper.make_node("Cast", [acc], [acc_f], name=fresh("cast"), to=TensorProto.FLOAT),
             helper.make_node("Mul", [x_s, w_s], [s], name=fresh("scale_product")),
             helper.make_node("Mul", [acc_f, s], [y], name=fresh("rescale"))]
    if bias is not None:
        beta = float(attrs.get("beta", 1.0))
        c = bias
        if beta != 1.0:
            c = fresh("bias")
            inits.append(numpy_helper.from_array((numpy_helper.to_array(consts[bias]) * beta).astype(np.float32), c))
        nodes.append(helper.make_node("Add", [y, c], [node.output[0]], name=fresh("bias_add")))
    return nodes, inits
